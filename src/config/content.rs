//! What vision probes send, as the config names it: the built-in image catalogue and
//! image files, and `kserve_v2` input tensors; the types and their checks (prompts are
//! prompts.rs'). The bytes themselves are made by payload/ when a probe is built.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, Visitor};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use super::diagnostics::Diagnostics;
use super::files;
use super::formats::{closed_set, schema_type};
use super::positions::{closest, not_one_of, suggest};
use super::values::file_message;
use crate::probe::kinds::Kind;

/// How a built-in image is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageFormat {
    Jpeg,
    Png,
}

/// What a built-in image shows: a photo-like outdoor scene, or a chart with text (the
/// screenshots and documents people send to vision models).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scene {
    Photo,
    Chart,
}

/// One of our generated images. The pixels are made by payload/images.rs when a probe is
/// built; this is only the catalogue, so the config can be checked without making them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BuiltinImage {
    pub name: &'static str,
    pub width: u32,
    pub height: u32,
    pub format: ImageFormat,
    pub scene: Scene,
}

/// The built-in images, at the sizes people send: classifier inputs (224x224), camera
/// frames (640x480), screenshots and video frames (1920x1080), and a phone photo of a few
/// MB (4000x3000).
pub const BUILTIN_IMAGES: &[BuiltinImage] = &[
    BuiltinImage {
        name: "scene-224.jpg",
        width: 224,
        height: 224,
        format: ImageFormat::Jpeg,
        scene: Scene::Photo,
    },
    BuiltinImage {
        name: "scene-224.png",
        width: 224,
        height: 224,
        format: ImageFormat::Png,
        scene: Scene::Photo,
    },
    BuiltinImage {
        name: "scene-640x480.jpg",
        width: 640,
        height: 480,
        format: ImageFormat::Jpeg,
        scene: Scene::Photo,
    },
    BuiltinImage {
        name: "chart-640x480.png",
        width: 640,
        height: 480,
        format: ImageFormat::Png,
        scene: Scene::Chart,
    },
    BuiltinImage {
        name: "scene-1920x1080.jpg",
        width: 1920,
        height: 1080,
        format: ImageFormat::Jpeg,
        scene: Scene::Photo,
    },
    BuiltinImage {
        name: "chart-1920x1080.png",
        width: 1920,
        height: 1080,
        format: ImageFormat::Png,
        scene: Scene::Chart,
    },
    BuiltinImage {
        name: "photo-4000x3000.jpg",
        width: 4000,
        height: 3000,
        format: ImageFormat::Jpeg,
        scene: Scene::Photo,
    },
];

/// Where a probe's images come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ImageSource {
    Builtin(BuiltinImage),
    /// A JPEG or PNG file (folders are expanded when the config is loaded).
    File(PathBuf),
}

/// The images a probe sends, rotated per run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Images {
    pub sources: Vec<ImageSource>,
    /// Images in each request.
    pub per_run: usize,
    /// OpenAI's `detail` (`low`, `high`, `auto`), when set.
    pub detail: Option<String>,
    /// `http` only: how the images travel.
    pub upload: Upload,
}

/// How an `http` probe sends its images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upload {
    /// `multipart/form-data`, one file part per image in the named field (TorchServe and
    /// most FastAPI/Flask services read `data` or `file`).
    Multipart { field: String },
    /// The image file as the whole body, with its media type.
    Raw,
}

/// Open Inference Protocol tensor datatypes.
pub const TENSOR_DATATYPES: &[&str] = &[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64",
    "BF16", "BYTES",
];

/// `kserve_v2`: the input tensor to send.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInput {
    pub name: String,
    pub datatype: String,
    /// As sent; for image pixels, the size the image is resized to.
    pub shape: Vec<i64>,
    pub data: TensorData,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    /// Numbers (or strings) given in the config, row-major.
    Literal(Vec<serde_json::Value>),
    /// The probe's image file as one base64 BYTES element, decoded by the model.
    ImageBytes,
    /// The probe's image decoded to RGB, resized to the shape and laid out as given;
    /// UINT8 0-255, or FP32 0-1.
    ImagePixels { channels_first: bool },
}

pub(crate) fn tensor_input(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    prefix: &str,
    raw: Option<RawInput>,
    images: Option<&Images>,
) -> Option<TensorInput> {
    let key = format!("{prefix}.input");
    let Some(raw) = raw else {
        cx.error(probe, &key, "kind kserve_v2 needs an `input` tensor");
        return None;
    };
    let datatype = raw.datatype.to_ascii_uppercase();
    if !TENSOR_DATATYPES.contains(&datatype.as_str()) {
        // The names other frameworks give these types (numpy, torch, ONNX).
        let alias = match datatype.as_str() {
            "FLOAT" | "FLOAT32" => Some("FP32"),
            "HALF" | "FLOAT16" => Some("FP16"),
            "DOUBLE" | "FLOAT64" => Some("FP64"),
            "BFLOAT16" => Some("BF16"),
            "INT" => Some("INT32"),
            "LONG" => Some("INT64"),
            "STRING" | "STR" => Some("BYTES"),
            _ => None,
        };
        let list = TENSOR_DATATYPES.join(", ");
        let message = match alias
            .map(str::to_owned)
            .or_else(|| closest(&datatype, TENSOR_DATATYPES))
        {
            Some(s) => format!("`{}` is not one of {list}; did you mean `{s}`?", raw.datatype),
            None => format!("`{}` is not one of {list}", raw.datatype),
        };
        cx.error(probe, &format!("{key}.datatype"), message);
        return None;
    }
    if raw.shape.is_empty() || raw.shape.iter().any(|d| *d < 1) {
        cx.error(probe, &format!("{key}.shape"), "dimensions must be 1 or more");
        return None;
    }
    let elements = raw.shape.iter().try_fold(1i64, |acc, d| acc.checked_mul(*d));
    let Some(elements) = elements.filter(|e| *e <= MAX_TENSOR_ELEMENTS) else {
        cx.error(
            probe,
            &format!("{key}.shape"),
            format!("more than {MAX_TENSOR_ELEMENTS} elements"),
        );
        return None;
    };
    let data = match (raw.data, raw.image.as_deref()) {
        (Some(values), None) => {
            if values.len() as i64 != elements {
                cx.error(
                    probe,
                    &format!("{key}.data"),
                    format!(
                        "{} values for shape {:?}, which holds {elements}",
                        values.len(),
                        raw.shape
                    ),
                );
                return None;
            }
            TensorData::Literal(values)
        }
        (None, Some(how)) => {
            if images.is_none() {
                cx.error(probe, &format!("{key}.image"), "set the probe's `images` to send");
                return None;
            }
            match how {
                "bytes" if datatype == "BYTES" => TensorData::ImageBytes,
                "bytes" => {
                    cx.error(
                        probe,
                        &format!("{key}.datatype"),
                        "encoded image bytes travel as BYTES",
                    );
                    return None;
                }
                "pixels" => {
                    let channels_first = match raw.layout.as_deref().unwrap_or("NHWC") {
                        "NHWC" => false,
                        "NCHW" => true,
                        other => {
                            cx.error(
                                probe,
                                &format!("{key}.layout"),
                                not_one_of(other, &["NHWC", "NCHW"]),
                            );
                            return None;
                        }
                    };
                    let channels = if channels_first {
                        raw.shape.get(1)
                    } else {
                        raw.shape.get(3)
                    };
                    if raw.shape.len() != 4 || raw.shape[0] != 1 || channels != Some(&3) {
                        cx.error(
                            probe,
                            &format!("{key}.shape"),
                            "pixels need a shape [1, H, W, 3] (NHWC) or [1, 3, H, W] (NCHW)",
                        );
                        return None;
                    }
                    if !matches!(datatype.as_str(), "UINT8" | "FP32") {
                        cx.error(
                            probe,
                            &format!("{key}.datatype"),
                            "pixels travel as UINT8 (0-255) or FP32 (0-1)",
                        );
                        return None;
                    }
                    TensorData::ImagePixels { channels_first }
                }
                other => {
                    cx.error(
                        probe,
                        &format!("{key}.image"),
                        not_one_of(other, &["bytes", "pixels"]),
                    );
                    return None;
                }
            }
        }
        _ => {
            cx.error(probe, &key, "set exactly one of `data` or `image`");
            return None;
        }
    };
    Some(TensorInput {
        name: raw.name,
        datatype,
        shape: raw.shape,
        data,
    })
}

pub(crate) fn images(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    prefix: &str,
    kind: Kind,
    raw: RawImages,
) -> Option<Images> {
    let key = format!("{prefix}.images");
    if !kind.takes_images() {
        cx.error(
            probe,
            &key,
            format!("kind {} does not take images", kind.as_str()),
        );
        return None;
    }
    let mut sources = Vec::new();
    if raw.builtin.as_ref().is_some_and(Vec::is_empty)
        || raw.files.as_ref().is_some_and(Vec::is_empty)
        || raw.list.as_ref().is_some_and(Vec::is_empty)
    {
        cx.error(probe, &key, "an empty list of images");
    }
    for (i, name) in raw.builtin.iter().flatten().enumerate() {
        match BUILTIN_IMAGES.iter().find(|b| b.name == name) {
            Some(b) => sources.push(ImageSource::Builtin(*b)),
            None => {
                let names: Vec<_> = BUILTIN_IMAGES.iter().map(|b| b.name).collect();
                let message = match suggest(name, &names) {
                    Some(s) => format!("no built-in image `{name}`; did you mean `{s}`?"),
                    None => format!(
                        "no built-in image `{name}`; the built-in images are {}",
                        names.join(", ")
                    ),
                };
                cx.error(probe, &format!("{key}.builtin[{i}]"), message);
            }
        }
    }
    for (i, file) in raw.files.iter().flatten().enumerate() {
        image_files(cx, probe, &format!("{key}.files[{i}]"), file, &mut sources);
    }
    // A plain list: each item a built-in image if it names one, else a file.
    for (i, item) in raw.list.iter().flatten().enumerate() {
        match BUILTIN_IMAGES.iter().find(|b| b.name == item) {
            Some(b) => sources.push(ImageSource::Builtin(*b)),
            None => {
                let item_key = format!("{key}[{i}]");
                let names: Vec<_> = BUILTIN_IMAGES.iter().map(|b| b.name).collect();
                match suggest(item, &names) {
                    Some(s) if !cx.base_dir.join(item).exists() => cx.error(
                        probe,
                        &item_key,
                        format!(
                            "no built-in image or file `{item}` (relative to this file); did you mean the built-in `{s}`?"
                        ),
                    ),
                    _ => image_files(cx, probe, &item_key, item, &mut sources),
                }
            }
        }
    }
    if raw.builtin.is_none() && raw.files.is_none() && raw.list.is_none() {
        cx.error(probe, &key, "name `builtin` images, `files`, or both");
    }
    let per_run = raw.per_run.unwrap_or(1);
    if !(1..=16).contains(&per_run) {
        cx.error(probe, &format!("{key}.per_run"), "must be between 1 and 16");
    }
    if let Some(d) = &raw.detail {
        if !kind.image_detail() {
            cx.error(
                probe,
                &format!("{key}.detail"),
                "only for openai_chat and openai_responses",
            );
        } else if !matches!(d.as_str(), "low" | "high" | "auto") {
            cx.error(
                probe,
                &format!("{key}.detail"),
                not_one_of(d, &["low", "high", "auto"]),
            );
        }
    }
    let upload = match (raw.upload.as_deref(), kind.uploads_images()) {
        (None | Some("multipart"), true) => Upload::Multipart {
            field: raw.field.clone().unwrap_or_else(|| "data".to_owned()),
        },
        (Some("raw"), true) => {
            if per_run != 1 {
                cx.error(
                    probe,
                    &format!("{key}.per_run"),
                    "a raw upload sends exactly one image",
                );
            }
            Upload::Raw
        }
        (Some(other), true) => {
            cx.error(
                probe,
                &format!("{key}.upload"),
                not_one_of(other, &["multipart", "raw"]),
            );
            Upload::Raw
        }
        (Some(_), false) => {
            cx.error(probe, &format!("{key}.upload"), "only for kind http");
            Upload::Raw
        }
        (None, false) => Upload::Raw,
    };
    if raw.field.is_some() && !matches!(upload, Upload::Multipart { .. }) {
        cx.error(
            probe,
            &format!("{key}.field"),
            "only for multipart uploads of kind http",
        );
    }
    (!sources.is_empty()).then_some(Images {
        sources,
        per_run,
        detail: raw.detail,
        upload,
    })
}

/// An image file to send: regular, and at most [`files::MAX_IMAGE_FILE_BYTES`] (it
/// is read when the probe is built, through the same checks).
pub(super) fn image_file(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    key: &str,
    path: PathBuf,
) -> Option<PathBuf> {
    let problem = match std::fs::metadata(&path) {
        Ok(m) if !m.is_file() => Some(files::FileError::NotRegular(files::kind(&m))),
        Ok(m) if m.len() > files::MAX_IMAGE_FILE_BYTES => {
            Some(files::FileError::TooLarge(files::MAX_IMAGE_FILE_BYTES))
        }
        Ok(_) => None,
        Err(e) => Some(files::FileError::Io(e)),
    };
    match problem {
        None => Some(path),
        Some(e) => {
            let name = path
                .strip_prefix(&cx.base_dir)
                .unwrap_or(&path)
                .display()
                .to_string();
            cx.error(probe, key, file_message(&name, &e));
            None
        }
    }
}

/// One item of `images.files` (or of a plain `images` list): a file, or a folder's
/// .jpg/.jpeg/.png files, relative to the config file.
fn image_files(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    file_key: &str,
    file: &str,
    sources: &mut Vec<ImageSource>,
) {
    let path = cx.base_dir.join(file);
    if path.is_dir() {
        // Regular files only: a FIFO named x.png would hang the probe's build.
        let mut found: Vec<PathBuf> = std::fs::read_dir(&path)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.extension().and_then(|e| e.to_str()).is_some_and(|e| {
                            matches!(e.to_ascii_lowercase().as_str(), "jpg" | "jpeg" | "png")
                        }) && p.is_file()
                    })
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        if found.is_empty() {
            cx.error(
                probe,
                file_key,
                format!("no .jpg, .jpeg or .png file in the folder `{file}`"),
            );
        }
        for f in found {
            if let Some(f) = image_file(cx, probe, file_key, f) {
                sources.push(ImageSource::File(f));
            }
        }
    } else {
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => cx.error(
                probe,
                file_key,
                format!("no such file or folder: `{file}` (relative to this file)"),
            ),
            _ => {
                if let Some(f) = image_file(cx, probe, file_key, path) {
                    sources.push(ImageSource::File(f));
                }
            }
        }
    }
}

/// Largest tensor we build from a config (elements), and image side for pixels.
const MAX_TENSOR_ELEMENTS: i64 = 64 * 1024 * 1024;

/// `images:` as a mapping (`builtin`, `files`, ...) or a plain list, `[cat.jpg, x.png]`,
/// whose items are built-in images or files by whether they name a built-in one.
#[derive(Debug, Default)]
pub(crate) struct RawImages {
    pub(super) builtin: Option<Vec<String>>,
    pub(super) files: Option<Vec<String>>,
    pub(super) per_run: Option<usize>,
    pub(super) detail: Option<String>,
    pub(super) upload: Option<String>,
    pub(super) field: Option<String>,
    /// The plain list, as written.
    pub(super) list: Option<Vec<String>>,
}

/// Images as a mapping: built-in ones, files, or both.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "ImagesMapping", transform = some_image_source)]
pub(super) struct ImagesMap {
    /// Generated images, by name (a photo-like scene or a chart, at common sizes).
    #[schemars(with = "Option<Vec<BuiltinImageName>>", length(min = 1))]
    builtin: Option<Vec<String>>,
    /// JPEG or PNG files, or folders of them, relative to this file.
    #[schemars(length(min = 1))]
    files: Option<Vec<String>>,
    /// Images sent per run, taken in turn (default 1).
    #[schemars(range(min = 1, max = 16))]
    per_run: Option<usize>,
    /// openai_chat, openai_responses: the resolution the model looks at (low, high, auto).
    #[schemars(with = "Option<ImageDetail>")]
    detail: Option<String>,
    /// http: how images are sent: `multipart` (a form field, as TorchServe reads it;
    /// the default) or `raw` (the file as the whole body).
    #[schemars(with = "Option<UploadAs>")]
    upload: Option<String>,
    /// http, multipart upload: the form field's name (default `data`).
    field: Option<String>,
}

impl<'de> Deserialize<'de> for RawImages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ListOrMap {
            expecting: "a list of images (built-in names or files), or a mapping with `builtin` and/or `files`",
            list: |list: Vec<String>| RawImages {
                list: Some(list),
                ..RawImages::default()
            },
            map: |m: ImagesMap| RawImages {
                builtin: m.builtin,
                files: m.files,
                per_run: m.per_run,
                detail: m.detail,
                upload: m.upload,
                field: m.field,
                list: None,
            },
            shape: std::marker::PhantomData,
        })
    }
}

/// A key that takes a list of items `I` or a mapping `M`: each becomes the raw shape `T`.
/// The mapping is read by `M`'s derived code, so unknown keys are reported as anywhere.
pub(super) struct ListOrMap<M, I, L, F> {
    pub(super) expecting: &'static str,
    pub(super) list: L,
    pub(super) map: F,
    pub(super) shape: std::marker::PhantomData<fn() -> (M, I)>,
}

impl<'de, T, M, I, L, F> Visitor<'de> for ListOrMap<M, I, L, F>
where
    M: Deserialize<'de>,
    I: Deserialize<'de>,
    L: FnOnce(Vec<I>) -> T,
    F: FnOnce(M) -> T,
{
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        let list = Vec::<I>::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok((self.list)(list))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        let m = M::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok((self.map)(m))
    }
}

/// kserve_v2: the input tensor, literal `data` or the probe's images.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Input")]
pub(crate) struct RawInput {
    /// The model's input name, e.g. input-0.
    pub(super) name: String,
    /// The tensor's datatype, e.g. FP32, UINT8, BYTES.
    #[schemars(with = "Datatype")]
    pub(super) datatype: String,
    /// The tensor's shape, e.g. [1, 64] or [1, 3, 224, 224].
    pub(super) shape: Vec<i64>,
    /// The values, row-major, as many as the shape holds (or set `image`).
    pub(super) data: Option<Vec<serde_json::Value>>,
    /// Send the probe's images: `pixels` (decoded, resized to the shape) or `bytes`
    /// (the encoded file as one BYTES element).
    #[schemars(with = "Option<TensorImage>")]
    pub(super) image: Option<String>,
    /// image: pixels: NHWC (default) or NCHW.
    #[schemars(with = "Option<Layout>")]
    pub(super) layout: Option<String>,
}

schema_type!(
    /// `images.detail`.
    ImageDetail,
    closed_set("How much of the image the model looks at.", &["low", "high", "auto"], false)
);

schema_type!(
    /// `images.upload`.
    UploadAs,
    closed_set("How an http probe sends images.", &["multipart", "raw"], false)
);

schema_type!(
    /// `input.image`.
    TensorImage,
    closed_set("How the probe's images become the input tensor.", &["pixels", "bytes"], false)
);

schema_type!(
    /// `input.layout`.
    Layout,
    closed_set(
        "Where the colour channels are: NHWC [1, H, W, 3] or NCHW [1, 3, H, W].",
        &["NHWC", "NCHW"],
        false
    )
);

schema_type!(
    /// `input.datatype`: the Open Inference Protocol's, in any case.
    Datatype,
    closed_set("An Open Inference Protocol tensor datatype.", TENSOR_DATATYPES, true)
);

schema_type!(
    /// An item of `images.builtin`.
    BuiltinImageName,
    closed_set(
        "A built-in image: a photo-like scene or a chart with text, at common sizes.",
        &BUILTIN_IMAGES.iter().map(|b| b.name).collect::<Vec<_>>(),
        false
    )
);

/// `images:` is a plain list (built-in names or files) or a mapping: [`RawImages`]'s
/// hand-written Deserialize, with the mapping's keys from [`ImagesMap`].
impl JsonSchema for RawImages {
    fn schema_name() -> Cow<'static, str> {
        "Images".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let map = generator.subschema_for::<ImagesMap>();
        let builtin: Vec<&str> = BUILTIN_IMAGES.iter().map(|b| b.name).collect();
        json_schema!({
            "oneOf": [
                {
                    "type": "array",
                    "items": {"type": "string", "examples": builtin},
                    "description": "Built-in images by name, or JPEG/PNG files or folders relative to this file.",
                },
                map,
            ],
        })
    }
}

/// A mapping key set to something: the loader reads `key:` with no value as no key.
/// `message` is what editors say when none of the keys is set.
pub(super) fn set(key: &str, message: &str) -> Value {
    json!({"required": [key], "properties": {key: {"not": {"type": "null"}}}, "errorMessage": message})
}

/// `images:` as a mapping names built-in images, files or both (content.rs). Used as
/// `#[schemars(transform)]`.
pub(super) fn some_image_source(schema: &mut Schema) {
    let message = "Name `builtin` images, `files`, or both.";
    schema.insert(
        "anyOf".into(),
        json!([set("builtin", message), set("files", message)]),
    );
}
