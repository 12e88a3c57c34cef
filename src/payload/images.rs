//! Realistic images for vision probes: our own generated set (photo-like scenes and
//! charts with text, at the sizes people send) and the user's files. Every image is
//! encoded once, when a probe is built, and shared by every probe that uses it; a run
//! only picks the next one.
//!
//! The scenes have the statistics that make real photos cost what they cost to encode
//! and to decode: a sky gradient with fractal clouds, hills, textured ground (1/f
//! noise), buildings with windows, a sign with text, and sensor grain. A flat test
//! pattern would compress to almost nothing and tell little about a real upload.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bytes::Bytes;
use image::{ImageEncoder, Rgb, RgbImage};

use crate::config::{BuiltinImage, ImageFormat, ImageSource, Images, Scene};

/// An encoded image, ready to send.
#[derive(Debug)]
pub struct Image {
    /// The built-in name or the file name (never a full path: it may be shown).
    pub name: String,
    /// `image/jpeg` or `image/png`.
    pub media_type: &'static str,
    pub width: u32,
    pub height: u32,
    pub bytes: Bytes,
    /// The bytes in standard base64, made once.
    pub base64: Arc<str>,
}

impl Image {
    /// `data:image/jpeg;base64,...` for OpenAI-style image URLs.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type, self.base64)
    }

    /// The size bucket, a label: compare latency by resolution as by prompt length.
    pub fn bucket(&self) -> &'static str {
        image_bucket(u64::from(self.width) * u64::from(self.height))
    }
}

/// Serializes an image as a `data:` URL straight into the JSON being written, without
/// building the multi-megabyte string first.
pub struct DataUrl<'a>(pub &'a Image);

impl serde::Serialize for DataUrl<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!(
            "data:{};base64,{}",
            self.0.media_type, self.0.base64
        ))
    }
}

/// `small` up to 0.1 MP (224x224 is 0.05), `medium` up to 0.5 MP (640x480), `large` up
/// to 2.5 MP (1920x1080), `xlarge` above (phone photos).
pub fn image_bucket(pixels: u64) -> &'static str {
    match pixels {
        0..=100_000 => "small",
        100_001..=500_000 => "medium",
        500_001..=2_500_000 => "large",
        _ => "xlarge",
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("cannot read image {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path} is not a JPEG or PNG image")]
    Format { path: String },
    #[error("cannot encode {name}: {message}")]
    Encode { name: String, message: String },
}

/// Encoded images by source, shared across probes and kept across reloads, so a
/// thousand probes sending the same photo hold one copy and a reload re-encodes nothing.
#[derive(Debug, Default)]
pub struct ImageStore {
    cache: Mutex<HashMap<ImageSource, Arc<Image>>>,
}

impl ImageStore {
    pub fn load(&self, source: &ImageSource) -> Result<Arc<Image>, ImageError> {
        if let Some(image) = self.cache.lock().expect("image cache").get(source) {
            return Ok(image.clone());
        }
        // Made outside the lock: a large image takes a moment and others may proceed.
        let image = Arc::new(match source {
            ImageSource::Builtin(b) => generate(b)?,
            ImageSource::File(path) => read_file(path)?,
        });
        Ok(self
            .cache
            .lock()
            .expect("image cache")
            .entry(source.clone())
            .or_insert(image)
            .clone())
    }
}

/// A probe's images, handed out `per_run` at a time, round-robin.
#[derive(Debug)]
pub struct ImageSet {
    images: Vec<Arc<Image>>,
    per_run: usize,
    next: AtomicUsize,
    pub detail: Option<String>,
}

impl ImageSet {
    pub fn build(spec: &Images, store: &ImageStore) -> Result<Self, ImageError> {
        Ok(ImageSet {
            images: spec
                .sources
                .iter()
                .map(|s| store.load(s))
                .collect::<Result<_, _>>()?,
            per_run: spec.per_run,
            next: AtomicUsize::new(0),
            detail: spec.detail.clone(),
        })
    }

    /// The images for the next run.
    pub fn next(&self) -> Vec<Arc<Image>> {
        let start = self.next.fetch_add(self.per_run, Ordering::Relaxed);
        (0..self.per_run)
            .map(|i| self.images[(start + i) % self.images.len()].clone())
            .collect()
    }

    pub fn images(&self) -> &[Arc<Image>] {
        &self.images
    }
}

/// The bucket of a run's images: that of the largest one, or `none`.
pub fn bucket_of(images: &[Arc<Image>]) -> &'static str {
    images
        .iter()
        .map(|i| u64::from(i.width) * u64::from(i.height))
        .max()
        .map_or("none", image_bucket)
}

fn read_file(path: &Path) -> Result<Image, ImageError> {
    let shown = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Regular files only, capped: the config checked this, but the file may have changed.
    let bytes = crate::config::files::read_regular(path, crate::config::files::MAX_IMAGE_FILE_BYTES)
        .map_err(|e| ImageError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    let format = image::guess_format(&bytes).ok();
    let media_type = match format {
        Some(image::ImageFormat::Jpeg) => "image/jpeg",
        Some(image::ImageFormat::Png) => "image/png",
        _ => {
            return Err(ImageError::Format {
                path: path.display().to_string(),
            });
        }
    };
    let (width, height) =
        image::ImageReader::with_format(std::io::Cursor::new(&bytes), format.expect("matched"))
            .into_dimensions()
            .map_err(|e| ImageError::Read {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
    Ok(finish(shown, media_type, width, height, bytes))
}

fn finish(name: String, media_type: &'static str, width: u32, height: u32, bytes: Vec<u8>) -> Image {
    let base64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    Image {
        name,
        media_type,
        width,
        height,
        bytes: Bytes::from(bytes),
        base64: Arc::from(base64),
    }
}

/// Renders and encodes a built-in image. Deterministic: the same bytes every time.
pub fn generate(b: &BuiltinImage) -> Result<Image, ImageError> {
    let seed = seed_of(b.name);
    let pixels = match b.scene {
        Scene::Photo => photo(b.width, b.height, seed),
        Scene::Chart => chart(b.width, b.height, seed),
    };
    let mut out = Vec::new();
    let encoded =
        match b.format {
            ImageFormat::Jpeg => image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
                .write_image(pixels.as_raw(), b.width, b.height, image::ExtendedColorType::Rgb8),
            ImageFormat::Png => image::codecs::png::PngEncoder::new(&mut out).write_image(
                pixels.as_raw(),
                b.width,
                b.height,
                image::ExtendedColorType::Rgb8,
            ),
        };
    encoded.map_err(|e| ImageError::Encode {
        name: b.name.to_owned(),
        message: e.to_string(),
    })?;
    let media_type = match b.format {
        ImageFormat::Jpeg => "image/jpeg",
        ImageFormat::Png => "image/png",
    };
    Ok(finish(b.name.to_owned(), media_type, b.width, b.height, out))
}

fn seed_of(name: &str) -> u32 {
    name.bytes().fold(2_166_136_261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    })
}

// ---------------------------------------------------------------------------------------
// Noise.

/// A hash of a lattice point to [0, 1).
fn lattice(x: i32, y: i32, seed: u32) -> f32 {
    let mut h = (x as u32).wrapping_mul(0x27d4_eb2d)
        ^ (y as u32).wrapping_mul(0x1656_67b1)
        ^ seed.wrapping_mul(0x9e37_79b9);
    h ^= h >> 15;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    (h >> 8) as f32 / (1u32 << 24) as f32
}

/// Smooth value noise in [0, 1).
fn value_noise(x: f32, y: f32, seed: u32) -> f32 {
    let (xi, yi) = (x.floor() as i32, y.floor() as i32);
    let (fx, fy) = (x - x.floor(), y - y.floor());
    let (sx, sy) = (fx * fx * (3.0 - 2.0 * fx), fy * fy * (3.0 - 2.0 * fy));
    let a = lattice(xi, yi, seed);
    let b = lattice(xi + 1, yi, seed);
    let c = lattice(xi, yi + 1, seed);
    let d = lattice(xi + 1, yi + 1, seed);
    let top = a + (b - a) * sx;
    let bottom = c + (d - c) * sx;
    top + (bottom - top) * sy
}

/// Fractal (1/f) noise: octaves of value noise, each half the size and weight of the
/// last, the spectrum of natural textures.
fn fbm(x: f32, y: f32, seed: u32, octaves: u32) -> f32 {
    let (mut sum, mut amp, mut freq, mut norm) = (0.0, 1.0, 1.0, 0.0);
    for o in 0..octaves {
        sum += amp * value_noise(x * freq, y * freq, seed.wrapping_add(o * 101));
        norm += amp;
        amp *= 0.5;
        freq *= 2.0;
    }
    sum / norm
}

fn mix(a: [f32; 3], b: [f32; 3], t: f32) -> [f32; 3] {
    let t = t.clamp(0.0, 1.0);
    [
        a[0] + (b[0] - a[0]) * t,
        a[1] + (b[1] - a[1]) * t,
        a[2] + (b[2] - a[2]) * t,
    ]
}

fn to_rgb(c: [f32; 3]) -> Rgb<u8> {
    Rgb([
        c[0].clamp(0.0, 255.0) as u8,
        c[1].clamp(0.0, 255.0) as u8,
        c[2].clamp(0.0, 255.0) as u8,
    ])
}

// ---------------------------------------------------------------------------------------
// Scenes.

/// An outdoor scene. Large images are composed at up to 1024 px wide and scaled up,
/// then get full-resolution grain, as a camera's optics and sensor would give them.
fn photo(width: u32, height: u32, seed: u32) -> RgbImage {
    let scale = (width.max(height) as f32 / 1024.0).max(1.0);
    let (bw, bh) = (
        ((width as f32) / scale).ceil() as u32,
        ((height as f32) / scale).ceil() as u32,
    );
    let mut base = compose_scene(bw.max(1), bh.max(1), seed);
    if (bw, bh) != (width, height) {
        base = image::imageops::resize(&base, width, height, image::imageops::FilterType::Triangle);
    }
    for (x, y, p) in base.enumerate_pixels_mut() {
        let grain = (lattice(x as i32, y as i32, seed ^ 0x5eed) - 0.5) * 14.0;
        for c in &mut p.0 {
            *c = (f32::from(*c) + grain).clamp(0.0, 255.0) as u8;
        }
    }
    base
}

fn compose_scene(w: u32, h: u32, seed: u32) -> RgbImage {
    let (wf, hf) = (w as f32, h as f32);
    let horizon = hf * 0.52;
    let mut img = RgbImage::new(w, h);
    for y in 0..h {
        for x in 0..w {
            let (xf, yf) = (x as f32, y as f32);
            let u = xf / wf;
            let ridge = horizon - hf * (0.08 + 0.12 * fbm(u * 3.0, 0.5, seed ^ 0x41, 4));
            let color = if yf < ridge {
                // Sky: a gradient with fractal clouds.
                let sky = mix([70.0, 120.0, 200.0], [185.0, 210.0, 235.0], yf / ridge);
                let cloud = fbm(xf / wf * 4.0, yf / hf * 8.0, seed ^ 0xc1, 5);
                mix(sky, [245.0, 245.0, 250.0], (cloud - 0.52) * 3.0)
            } else if yf < horizon {
                // Distant hills, hazy.
                let t = fbm(xf / wf * 12.0, yf / hf * 12.0, seed ^ 0x77, 4);
                mix([70.0, 95.0, 80.0], [120.0, 140.0, 130.0], t)
            } else {
                // Ground: grass and soil, coarser texture nearer the camera.
                let depth = (yf - horizon) / (hf - horizon);
                let k = 6.0 + 30.0 * depth;
                let t = fbm(xf / wf * k, yf / hf * k * 2.0, seed ^ 0x99, 5);
                let grass = mix([60.0, 110.0, 40.0], [120.0, 150.0, 60.0], t);
                mix(
                    grass,
                    [115.0, 90.0, 60.0],
                    (fbm(xf / wf * 3.0, yf / hf * 3.0, seed ^ 0x13, 3) - 0.55) * 4.0,
                )
            };
            img.put_pixel(x, y, to_rgb(color));
        }
    }
    // Buildings with lit and dark windows along the horizon.
    let buildings = 3 + (seed % 4);
    for i in 0..buildings {
        let bx = (lattice(i as i32, 1, seed) * wf * 0.8) as u32;
        let bw = (wf * (0.06 + 0.08 * lattice(i as i32, 2, seed))) as u32;
        let bh = (hf * (0.12 + 0.22 * lattice(i as i32, 3, seed))) as u32;
        let top = (horizon as u32).saturating_sub(bh);
        let shade = 90.0 + 90.0 * lattice(i as i32, 4, seed);
        for y in top..(horizon as u32).min(h) {
            for x in bx..(bx + bw).min(w) {
                let (wx, wy) = ((x - bx) % 9, (y - top) % 11);
                let window = (2..6).contains(&wx) && (3..8).contains(&wy);
                let c = if window {
                    let lit = lattice((x - bx) as i32 / 9, (y - top) as i32 / 11, seed ^ i) > 0.6;
                    if lit {
                        [235.0, 215.0, 140.0]
                    } else {
                        [40.0, 50.0, 60.0]
                    }
                } else {
                    [shade, shade * 0.95, shade * 0.9]
                };
                img.put_pixel(x, y, to_rgb(c));
            }
        }
    }
    // A sign with text, as in street photos people ask models about.
    let scale = (w / 160).max(1);
    let text = "OPEN 24H";
    let (sx, sy) = (w / 12, (horizon + (hf - horizon) * 0.25) as u32);
    let (tw, th) = (text.len() as u32 * 6 * scale + 4 * scale, 11 * scale);
    fill_rect(&mut img, sx, sy, tw, th, Rgb([200, 40, 40]));
    draw_text(
        &mut img,
        sx + 2 * scale,
        sy + 2 * scale,
        scale,
        text,
        Rgb([250, 250, 245]),
    );
    img
}

/// A bar chart with a trend line, grid and labels: the screenshot-like image with text.
fn chart(w: u32, h: u32, seed: u32) -> RgbImage {
    let mut img = RgbImage::from_pixel(w, h, Rgb([252, 252, 250]));
    let scale = (w / 320).max(1);
    draw_text(
        &mut img,
        w / 20,
        h / 24,
        scale * 2,
        "P95 LATENCY BY REGION",
        Rgb([30, 30, 40]),
    );
    let (left, right, top, bottom) = (w * 3 / 20, w - w / 20, h / 6, h - h / 8);
    for i in 0..=5 {
        let y = bottom - (bottom - top) * i / 5;
        fill_rect(
            &mut img,
            left,
            y,
            right - left,
            1.max(scale / 2),
            Rgb([220, 222, 228]),
        );
        let label = format!("{}MS", i * 200);
        let x = left.saturating_sub((label.len() as u32 * 6 + 2) * scale);
        draw_text(
            &mut img,
            x,
            y.saturating_sub(3 * scale),
            scale,
            &label,
            Rgb([90, 90, 100]),
        );
    }
    let bars = 8u32;
    let slot = (right - left) / bars;
    let palette = [
        Rgb([66, 133, 244]),
        Rgb([219, 68, 55]),
        Rgb([244, 180, 0]),
        Rgb([15, 157, 88]),
    ];
    let mut last: Option<(u32, u32)> = None;
    for i in 0..bars {
        let v = 0.2 + 0.75 * lattice(i as i32, 7, seed);
        let bh = ((bottom - top) as f32 * v) as u32;
        let x = left + i * slot + slot / 6;
        fill_rect(
            &mut img,
            x,
            bottom - bh,
            slot * 2 / 3,
            bh,
            palette[i as usize % palette.len()],
        );
        draw_text(
            &mut img,
            x,
            bottom + 3 * scale,
            scale,
            &format!("R{}", i + 1),
            Rgb([60, 60, 70]),
        );
        let point = (x + slot / 3, bottom - bh + bh / 4);
        if let Some(prev) = last {
            draw_line(&mut img, prev, point, Rgb([40, 40, 40]), scale);
        }
        last = Some(point);
    }
    fill_rect(&mut img, left, bottom, right - left, scale, Rgb([40, 40, 40]));
    fill_rect(&mut img, left, top, scale, bottom - top, Rgb([40, 40, 40]));
    img
}

fn fill_rect(img: &mut RgbImage, x: u32, y: u32, w: u32, h: u32, c: Rgb<u8>) {
    for yy in y..(y + h).min(img.height()) {
        for xx in x..(x + w).min(img.width()) {
            img.put_pixel(xx, yy, c);
        }
    }
}

fn draw_line(img: &mut RgbImage, (x0, y0): (u32, u32), (x1, y1): (u32, u32), c: Rgb<u8>, width: u32) {
    let steps = x0.abs_diff(x1).max(y0.abs_diff(y1)).max(1);
    for s in 0..=steps {
        let t = s as f32 / steps as f32;
        let x = (x0 as f32 + (x1 as f32 - x0 as f32) * t) as u32;
        let y = (y0 as f32 + (y1 as f32 - y0 as f32) * t) as u32;
        fill_rect(img, x, y, width, width, c);
    }
}

/// A 5x7 pixel font for the characters our images need; rows top to bottom, bit 4 is
/// the leftmost column.
fn glyph(c: char) -> [u8; 7] {
    match c {
        'A' => [0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
        'B' => [0x1e, 0x11, 0x11, 0x1e, 0x11, 0x11, 0x1e],
        'C' => [0x0e, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0e],
        'E' => [0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f],
        'G' => [0x0e, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0f],
        'H' => [0x11, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11],
        'I' => [0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f],
        'M' => [0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x19, 0x15, 0x13, 0x11, 0x11, 0x11],
        'O' => [0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
        'P' => [0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10],
        'R' => [0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11],
        'S' => [0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e],
        'T' => [0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'Y' => [0x11, 0x11, 0x0a, 0x04, 0x04, 0x04, 0x04],
        '0' => [0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e],
        '1' => [0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e],
        '2' => [0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f],
        '3' => [0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e],
        '4' => [0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02],
        '5' => [0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e],
        '6' => [0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e],
        '7' => [0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e],
        '9' => [0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e],
        'Z' => [0x1f, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1f],
        _ => [0; 7],
    }
}

fn draw_text(img: &mut RgbImage, x: u32, y: u32, scale: u32, text: &str, c: Rgb<u8>) {
    for (i, ch) in text.chars().enumerate() {
        let rows = glyph(ch);
        for (ry, row) in rows.iter().enumerate() {
            for rx in 0..5u32 {
                if row & (0x10 >> rx) != 0 {
                    let px = x + (i as u32 * 6 + rx) * scale;
                    let py = y + ry as u32 * scale;
                    fill_rect(img, px, py, scale, scale, c);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BUILTIN_IMAGES;

    fn builtin(name: &str) -> &'static BuiltinImage {
        BUILTIN_IMAGES.iter().find(|b| b.name == name).unwrap()
    }

    #[test]
    fn generated_images_decode_at_their_size_and_format() {
        for name in [
            "scene-224.jpg",
            "scene-224.png",
            "chart-640x480.png",
            "scene-640x480.jpg",
        ] {
            let b = builtin(name);
            let img = generate(b).unwrap();
            let decoded = image::load_from_memory(&img.bytes).unwrap();
            assert_eq!((decoded.width(), decoded.height()), (b.width, b.height), "{name}");
            let guessed = image::guess_format(&img.bytes).unwrap();
            let want = if name.ends_with(".png") {
                image::ImageFormat::Png
            } else {
                image::ImageFormat::Jpeg
            };
            assert_eq!(guessed, want);
            assert!(
                img.data_url()
                    .starts_with(&format!("data:{};base64,", img.media_type))
            );
            let json = serde_json::to_string(&DataUrl(&img)).unwrap();
            assert_eq!(json, format!("\"{}\"", img.data_url()));
        }
    }

    #[test]
    fn generation_is_deterministic() {
        let b = builtin("scene-224.jpg");
        assert_eq!(generate(b).unwrap().bytes, generate(b).unwrap().bytes);
    }

    #[test]
    fn scenes_are_not_flat() {
        // Photo-like content does not compress like a test pattern: a 640x480 JPEG of a
        // real scene at quality 90 is tens of kilobytes, not one.
        let img = generate(builtin("scene-640x480.jpg")).unwrap();
        assert!(img.bytes.len() > 30_000, "{} bytes", img.bytes.len());
        let decoded = image::load_from_memory(&img.bytes).unwrap().to_rgb8();
        let distinct: std::collections::HashSet<_> = decoded.pixels().map(|p| p.0).collect();
        assert!(distinct.len() > 5_000, "{} colours", distinct.len());
    }

    #[test]
    fn buckets_by_pixel_count() {
        assert_eq!(image_bucket(224 * 224), "small");
        assert_eq!(image_bucket(640 * 480), "medium");
        assert_eq!(image_bucket(1920 * 1080), "large");
        assert_eq!(image_bucket(4000 * 3000), "xlarge");
    }

    #[test]
    fn a_store_makes_each_image_once() {
        let store = ImageStore::default();
        let source = ImageSource::Builtin(*builtin("scene-224.jpg"));
        let a = store.load(&source).unwrap();
        let b = store.load(&source).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn image_sets_rotate_per_run() {
        let store = ImageStore::default();
        let spec = Images {
            sources: vec![
                ImageSource::Builtin(*builtin("scene-224.jpg")),
                ImageSource::Builtin(*builtin("chart-640x480.png")),
            ],
            per_run: 1,
            detail: None,
            upload: crate::config::Upload::Raw,
        };
        let set = ImageSet::build(&spec, &store).unwrap();
        let names: Vec<_> = (0..3).map(|_| set.next()[0].name.clone()).collect();
        assert_eq!(names, ["scene-224.jpg", "chart-640x480.png", "scene-224.jpg"]);
        assert_eq!(bucket_of(&set.next()), "medium");
        assert_eq!(bucket_of(&[]), "none");
    }

    #[test]
    fn user_files_keep_only_their_name_and_reject_other_formats() {
        let dir = std::env::temp_dir().join(format!("inferprobe-img-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let png = dir.join("mine.png");
        std::fs::write(&png, &generate(builtin("scene-224.png")).unwrap().bytes).unwrap();
        let img = read_file(&png).unwrap();
        assert_eq!(
            (img.name.as_str(), img.width, img.media_type),
            ("mine.png", 224, "image/png")
        );
        let txt = dir.join("notes.png");
        std::fs::write(&txt, b"not an image").unwrap();
        assert!(matches!(read_file(&txt), Err(ImageError::Format { .. })));
        std::fs::remove_dir_all(&dir).ok();
    }
}
