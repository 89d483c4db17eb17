//! Screenshots as models take them: scaled into every provider's limits, encoded as PNG.
//!
//! One size fits both wire formats, so neither provider rescales the picture and the
//! coordinates a model reads off it are the picture's own: Anthropic keeps images whose long
//! edge is at most 1568 px and whose area is at most about 1.15 megapixels; OpenAI's
//! high-detail mode shrinks the short edge to 768 px. The frame maps model coordinates back
//! to the screen.

use super::action::{ComputerError, Point};

/// Longest edge Anthropic takes without resizing.
pub const MAX_LONG_EDGE: u32 = 1568;
/// Area Anthropic takes without resizing (about 1.15 megapixels).
pub const MAX_PIXELS: u64 = 1_150_000;
/// Short edge OpenAI's high-detail mode takes without resizing.
pub const MAX_SHORT_EDGE: u32 = 768;

/// A screenshot ready for a model: PNG bytes, their size and the screen's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Screenshot {
    /// The picture, PNG-encoded.
    pub png: Vec<u8>,
    /// The picture's width in pixels: the frame the model's coordinates are in.
    pub width: u32,
    /// The picture's height in pixels.
    pub height: u32,
    /// The screen's width in pixels, before scaling.
    pub screen_width: u32,
    /// The screen's height in pixels, before scaling.
    pub screen_height: u32,
}

/// The screen's size and the screenshot's size derived from it: the two frames coordinates
/// travel between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub(crate) screen: (u32, u32),
    pub(crate) shot: (u32, u32),
}

impl Frame {
    /// The largest size within the limits with the screen's aspect ratio (never enlarged).
    pub fn for_screen(width: u32, height: u32) -> Frame {
        let (w, h) = (f64::from(width.max(1)), f64::from(height.max(1)));
        let mut scale = 1.0_f64;
        scale = scale.min(f64::from(MAX_LONG_EDGE) / w.max(h));
        scale = scale.min(f64::from(MAX_SHORT_EDGE) / w.min(h));
        scale = scale.min((MAX_PIXELS as f64 / (w * h)).sqrt());
        // Rounded down, so the result stays within every limit (the epsilon keeps an exact
        // 768.0 computed as 767.99.. at 768); at least one pixel.
        let shot_w = ((w * scale + 1e-6).floor() as u32).max(1);
        let shot_h = ((h * scale + 1e-6).floor() as u32).max(1);
        Frame {
            screen: (width, height),
            shot: (shot_w, shot_h),
        }
    }

    /// A point of the screenshot as a point of the screen (the centre of the pixels it
    /// stands for), refused when outside the screenshot.
    pub fn to_screen(&self, [x, y]: Point) -> Result<(i16, i16), ComputerError> {
        let (sw, sh) = self.shot;
        if x >= sw || y >= sh {
            return Err(ComputerError::OutOfScreen {
                x,
                y,
                width: sw,
                height: sh,
            });
        }
        let map = |v: u32, shot: u32, screen: u32| -> i16 {
            let scaled = (f64::from(v) + 0.5) * f64::from(screen) / f64::from(shot);
            // X coordinates are 16-bit; a screen is far smaller than i16::MAX.
            (scaled.floor() as i64).clamp(0, i64::from(i16::MAX)) as i16
        };
        Ok((map(x, sw, self.screen.0), map(y, sh, self.screen.1)))
    }
}

/// Shrinks an RGB8 picture of the frame's screen size to its shot size by averaging the
/// source pixels each target pixel covers (a box filter: no aliasing of thin text strokes).
pub fn scale_rgb(rgb: &[u8], frame: Frame) -> Vec<u8> {
    let (sw, sh) = (frame.screen.0 as usize, frame.screen.1 as usize);
    let (tw, th) = (frame.shot.0 as usize, frame.shot.1 as usize);
    if (sw, sh) == (tw, th) {
        return rgb.to_vec();
    }
    let mut out = Vec::with_capacity(tw * th * 3);
    for ty in 0..th {
        let (y0, y1) = (ty * sh / th, ((ty + 1) * sh / th).max(ty * sh / th + 1));
        for tx in 0..tw {
            let (x0, x1) = (tx * sw / tw, ((tx + 1) * sw / tw).max(tx * sw / tw + 1));
            let mut sum = [0u64; 3];
            for y in y0..y1.min(sh) {
                for x in x0..x1.min(sw) {
                    let i = (y * sw + x) * 3;
                    for (c, s) in sum.iter_mut().enumerate() {
                        *s += u64::from(rgb[i + c]);
                    }
                }
            }
            let n = ((y1.min(sh) - y0) * (x1.min(sw) - x0)).max(1) as u64;
            out.extend(sum.iter().map(|s| (s / n) as u8));
        }
    }
    out
}

/// PNG bytes of an RGB8 picture.
pub fn encode_png(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>, ComputerError> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_fit_every_limit_and_keep_small_screens() {
        assert_eq!(Frame::for_screen(1024, 768).shot, (1024, 768));
        for (w, h) in [
            (1920, 1080),
            (2560, 1600),
            (3840, 2160),
            (1280, 800),
            (800, 3000),
        ] {
            let (tw, th) = Frame::for_screen(w, h).shot;
            assert!(tw.max(th) <= MAX_LONG_EDGE, "{w}x{h} -> {tw}x{th}");
            assert!(tw.min(th) <= MAX_SHORT_EDGE, "{w}x{h} -> {tw}x{th}");
            assert!(
                u64::from(tw) * u64::from(th) <= MAX_PIXELS,
                "{w}x{h} -> {tw}x{th}"
            );
        }
        assert_eq!(Frame::for_screen(1920, 1080).shot, (1365, 768));
    }

    #[test]
    fn points_map_back_to_the_screen_and_outside_points_are_refused() {
        let f = Frame::for_screen(2048, 1536);
        assert_eq!(f.shot, (1024, 768));
        assert_eq!(f.to_screen([0, 0]).unwrap(), (1, 1));
        assert_eq!(f.to_screen([1023, 767]).unwrap(), (2047, 1535));
        assert!(f.to_screen([1024, 0]).is_err());
        let same = Frame::for_screen(640, 480);
        assert_eq!(same.to_screen([10, 20]).unwrap(), (10, 20));
    }

    #[test]
    fn the_box_filter_averages_and_the_png_decodes_to_the_same_pixels() {
        // 4x2 -> 2x1 after forcing a frame: left half black, right half white.
        let mut rgb = Vec::new();
        for _y in 0..2 {
            for x in 0..4 {
                let v = if x < 2 { 0 } else { 255 };
                rgb.extend([v, v, v]);
            }
        }
        let frame = Frame {
            screen: (4, 2),
            shot: (2, 1),
        };
        let small = scale_rgb(&rgb, frame);
        assert_eq!(small, vec![0, 0, 0, 255, 255, 255]);
        let png_bytes = encode_png(&small, 2, 1).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (2, 1));
        assert_eq!(&buf[..info.buffer_size()], &small[..]);
    }
}
