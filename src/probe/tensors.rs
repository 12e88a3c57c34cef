//! What the Open Inference Protocol's two transports share: an image made into an input
//! tensor's values, and the `expect` checks on the output tensors (`outputs`,
//! `output_shape`, `top_label`). `kserve_v2` (JSON over REST) and `kserve_v2_grpc`
//! (protobuf over gRPC) each decode their own wire form into [`OutputTensor`]s and hand
//! them here, so both judge a response the same way.
//!
//! Imports config and outcome, and payload for the images.

use crate::config::{Expect, TensorData, TensorInput};
use crate::outcome::{Failure, FailureReason};
use crate::payload::images::{Image, ImageError};

/// One output tensor as a response carried it, values row-major.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OutputTensor {
    pub name: String,
    pub shape: Vec<i64>,
    pub datatype: String,
    pub data: Vec<serde_json::Value>,
}

/// An image as a tensor's values: its pixels resized to the input's shape, RGB, laid
/// out NHWC or NCHW as the input says (0-255; an FP32 input divides them by 255).
pub(crate) fn image_pixels(input: &TensorInput, image: &Image) -> Result<Vec<u8>, ImageError> {
    let TensorData::ImagePixels { channels_first } = input.data else {
        unreachable!("only pixel inputs are decoded")
    };
    let (h, w) = if channels_first {
        (input.shape[2], input.shape[3])
    } else {
        (input.shape[1], input.shape[2])
    };
    let decoded = image::load_from_memory(&image.bytes).map_err(|e| ImageError::Read {
        path: image.name.clone(),
        message: e.to_string(),
    })?;
    let rgb = image::imageops::resize(
        &decoded.to_rgb8(),
        w as u32,
        h as u32,
        image::imageops::FilterType::Triangle,
    );
    let (w, h) = (w as usize, h as usize);
    let raw = rgb.as_raw();
    Ok(if channels_first {
        (0..3)
            .flat_map(|c| (0..h * w).map(move |i| raw[i * 3 + c]))
            .collect()
    } else {
        raw.clone()
    })
}

/// The output checks of `expect` on a response's outputs, in the order they were sent.
pub(crate) fn check_outputs(outputs: &[OutputTensor], expect: &Expect) -> Result<(), Failure> {
    let Some(first) = outputs.first() else {
        return Err(Failure::new(
            FailureReason::EmptyOutput,
            "the response has no outputs",
        ));
    };
    for name in &expect.outputs {
        if !outputs.iter().any(|o| &o.name == name) {
            let seen: Vec<_> = outputs.iter().map(|o| o.name.as_str()).collect();
            return Err(Failure::new(
                FailureReason::Assertion,
                format!("expected an output named {name:?}; the outputs are {seen:?}"),
            ));
        }
    }
    if let Some(shape) = &expect.output_shape
        && &first.shape != shape
    {
        return Err(Failure::new(
            FailureReason::Assertion,
            format!(
                "expected output {:?} to have shape {shape:?}, got {:?}",
                first.name, first.shape
            ),
        ));
    }
    if let Some(want) = &expect.top_label {
        let got = top_label(first).ok_or_else(|| {
            Failure::new(
                FailureReason::InvalidResponse,
                format!("output {:?} has no data", first.name),
            )
        })?;
        if &got != want {
            return Err(Failure::new(
                FailureReason::Assertion,
                format!(
                    "expected top label {want:?}, got {got:?} (output {:?})",
                    first.name
                ),
            ));
        }
    }
    Ok(())
}

/// A classifier's answer in its first row: the value itself when the output holds one
/// value per row (a class id or name), else the index of the largest score.
fn top_label(output: &OutputTensor) -> Option<String> {
    let rows = output.shape.first().copied().unwrap_or(1).max(1) as usize;
    let per_row = output.data.len() / rows;
    let row = output.data.get(..per_row.max(1))?;
    if per_row <= 1 || output.datatype == "BYTES" {
        return row.first().map(|v| match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => {
                format!("{}", n.as_f64().unwrap_or_default() as i64)
            }
            other => other.to_string(),
        });
    }
    row.iter()
        .enumerate()
        .filter_map(|(i, v)| v.as_f64().map(|f| (i, f)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(datatype: &str, shape: Vec<i64>, data: serde_json::Value) -> OutputTensor {
        OutputTensor {
            name: "o".into(),
            shape,
            datatype: datatype.into(),
            data: data.as_array().unwrap().clone(),
        }
    }

    #[test]
    fn top_label_is_the_value_or_the_argmax_of_the_first_row() {
        let id = output("INT64", vec![2, 1], serde_json::json!([7, 3]));
        assert_eq!(top_label(&id).as_deref(), Some("7"));
        let name = output("BYTES", vec![1, 1], serde_json::json!(["cat"]));
        assert_eq!(top_label(&name).as_deref(), Some("cat"));
        let scores = output(
            "FP32",
            vec![2, 3],
            serde_json::json!([0.1, 0.8, 0.1, 0.9, 0.0, 0.1]),
        );
        assert_eq!(top_label(&scores).as_deref(), Some("1"));
        let empty = output("FP32", vec![1, 0], serde_json::json!([]));
        assert_eq!(top_label(&empty), None);
    }
}
