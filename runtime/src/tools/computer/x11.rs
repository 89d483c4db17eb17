//! The computer tool's X11 client: input through the XTEST extension, screenshots through
//! GetImage, in Rust over the X protocol (x11rb), so no xdotool or ImageMagick need be
//! installed where the display runs.
//!
//! One connection per action: a call is rare next to the cost of a screenshot, and a fresh
//! connection sees the current keyboard map and screen size.

use std::time::Duration;

use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::xproto::{self, ConnectionExt as _, ImageFormat, ImageOrder};
use x11rb::protocol::xtest::{self, ConnectionExt as _};
use x11rb::rust_connection::RustConnection;

use super::action::{ComputerAction, ComputerError, MAX_WAIT_MS, Point, ScrollDirection};
use super::keys::{self, SHIFT_L};
use super::screenshot::{self, Frame, Screenshot};

/// Time for the applications to redraw after input, before the screenshot that shows it.
const SETTLE: Duration = Duration::from_millis(300);

/// Performs `action` on the display `name` (`None`: `$DISPLAY`) and returns the screenshot
/// taken after it. Blocking: call it off the async runtime.
pub fn perform(name: Option<&str>, action: &ComputerAction) -> Result<Screenshot, ComputerError> {
    let display = XDisplay::open(name)?;
    display.act(action)?;
    display.round_trip()?;
    if !matches!(
        action,
        ComputerAction::Screenshot | ComputerAction::Wait { .. }
    ) {
        std::thread::sleep(SETTLE);
    }
    display.screenshot()
}

/// An open connection and what it knows of the first screen.
struct XDisplay {
    conn: RustConnection,
    root: xproto::Window,
    frame: Frame,
}

impl XDisplay {
    fn open(name: Option<&str>) -> Result<XDisplay, ComputerError> {
        let (conn, screen_num) = x11rb::connect(name)?;
        if conn
            .extension_information(xtest::X11_EXTENSION_NAME)?
            .is_none()
        {
            return Err(ComputerError::NoXtest);
        }
        let screen = &conn.setup().roots[screen_num];
        let (root, w, h) = (screen.root, screen.width_in_pixels, screen.height_in_pixels);
        Ok(XDisplay {
            frame: Frame::for_screen(u32::from(w), u32::from(h)),
            conn,
            root,
        })
    }

    fn act(&self, action: &ComputerAction) -> Result<(), ComputerError> {
        match action {
            ComputerAction::Screenshot => {}
            ComputerAction::MouseMove { coordinate } => self.move_to(*coordinate)?,
            ComputerAction::LeftClick { coordinate } => self.click_at(*coordinate, 1, 1)?,
            ComputerAction::RightClick { coordinate } => self.click_at(*coordinate, 3, 1)?,
            ComputerAction::MiddleClick { coordinate } => self.click_at(*coordinate, 2, 1)?,
            ComputerAction::DoubleClick { coordinate } => self.click_at(*coordinate, 1, 2)?,
            ComputerAction::LeftClickDrag {
                start_coordinate,
                coordinate,
            } => {
                self.move_to(*start_coordinate)?;
                self.button(1, true)?;
                self.move_to(*coordinate)?;
                self.button(1, false)?;
            }
            ComputerAction::Type { text } => self.type_text(text)?,
            ComputerAction::Key { text } => self.chord(&keys::parse_chord(text)?)?,
            ComputerAction::Scroll {
                coordinate,
                scroll_direction,
                scroll_amount,
            } => {
                // The wheel is buttons 4 to 7 in X.
                let button = match scroll_direction {
                    ScrollDirection::Up => 4,
                    ScrollDirection::Down => 5,
                    ScrollDirection::Left => 6,
                    ScrollDirection::Right => 7,
                };
                self.click_at(*coordinate, button, (*scroll_amount).clamp(1, 50))?;
            }
            ComputerAction::Wait { duration_ms } => {
                self.round_trip()?;
                std::thread::sleep(Duration::from_millis((*duration_ms).min(MAX_WAIT_MS)));
            }
        }
        Ok(())
    }

    fn fake(&self, kind: u8, detail: u8, x: i16, y: i16) -> Result<(), ComputerError> {
        // Time 0 is CurrentTime; device 0 is the core pointer / keyboard.
        self.conn
            .xtest_fake_input(kind, detail, 0, self.root, x, y, 0)?;
        Ok(())
    }

    fn move_to(&self, point: Point) -> Result<(), ComputerError> {
        let (x, y) = self.frame.to_screen(point)?;
        self.fake(xproto::MOTION_NOTIFY_EVENT, 0, x, y)
    }

    fn button(&self, button: u8, down: bool) -> Result<(), ComputerError> {
        let kind = if down {
            xproto::BUTTON_PRESS_EVENT
        } else {
            xproto::BUTTON_RELEASE_EVENT
        };
        self.fake(kind, button, 0, 0)
    }

    fn click_at(&self, at: Option<Point>, button: u8, times: u32) -> Result<(), ComputerError> {
        if let Some(point) = at {
            self.move_to(point)?;
        }
        for _ in 0..times {
            self.button(button, true)?;
            self.button(button, false)?;
        }
        Ok(())
    }

    fn key(&self, keycode: u8, down: bool) -> Result<(), ComputerError> {
        let kind = if down {
            xproto::KEY_PRESS_EVENT
        } else {
            xproto::KEY_RELEASE_EVENT
        };
        self.fake(kind, keycode, 0, 0)
    }

    fn chord(&self, chord: &keys::Chord) -> Result<(), ComputerError> {
        let map = Keymap::read(&self.conn)?;
        let mut held = Vec::new();
        for m in &chord.modifiers {
            held.push(map.keycode(*m)?.0);
        }
        let (code, shifted) = map.keycode(chord.key)?;
        // A key that needs shift (e.g. `ctrl+A`) gets it unless the chord already holds it.
        if shifted && !chord.modifiers.contains(&SHIFT_L) {
            held.push(map.keycode(SHIFT_L)?.0);
        }
        for m in &held {
            self.key(*m, true)?;
        }
        self.key(code, true)?;
        self.key(code, false)?;
        for m in held.iter().rev() {
            self.key(*m, false)?;
        }
        Ok(())
    }

    fn type_text(&self, text: &str) -> Result<(), ComputerError> {
        let map = Keymap::read(&self.conn)?;
        let shift = map.keycode(SHIFT_L)?.0;
        // Every character is looked up before any is typed: a text with one unmappable
        // character types nothing rather than a part.
        let strokes = text
            .chars()
            .map(|c| map.keycode(keys::keysym_of_char(c)))
            .collect::<Result<Vec<_>, _>>()?;
        for (code, shifted) in strokes {
            if shifted {
                self.key(shift, true)?;
            }
            self.key(code, true)?;
            self.key(code, false)?;
            if shifted {
                self.key(shift, false)?;
            }
        }
        Ok(())
    }

    /// Waits until the server has handled every request sent so far.
    fn round_trip(&self) -> Result<(), ComputerError> {
        self.conn.get_input_focus()?.reply()?;
        Ok(())
    }

    fn screenshot(&self) -> Result<Screenshot, ComputerError> {
        let (w, h) = self.frame.screen;
        let reply = self
            .conn
            .get_image(
                ImageFormat::Z_PIXMAP,
                self.root,
                0,
                0,
                w as u16,
                h as u16,
                !0,
            )?
            .reply()?;
        let rgb = self.to_rgb(&reply)?;
        let small = screenshot::scale_rgb(&rgb, self.frame);
        let (sw, sh) = self.frame.shot;
        Ok(Screenshot {
            png: screenshot::encode_png(&small, sw, sh)?,
            width: sw,
            height: sh,
            screen_width: w,
            screen_height: h,
        })
    }

    /// The root window's pixels as RGB8, read through the root visual's channel masks.
    fn to_rgb(&self, image: &xproto::GetImageReply) -> Result<Vec<u8>, ComputerError> {
        let setup = self.conn.setup();
        let unsupported = |bits_per_pixel| ComputerError::Format {
            depth: image.depth,
            bits_per_pixel,
        };
        let format = setup
            .pixmap_formats
            .iter()
            .find(|f| f.depth == image.depth)
            .ok_or_else(|| unsupported(0))?;
        let bytes = usize::from(format.bits_per_pixel / 8);
        if !matches!(format.bits_per_pixel, 24 | 32) {
            return Err(unsupported(format.bits_per_pixel));
        }
        let visual = setup
            .roots
            .iter()
            .flat_map(|s| &s.allowed_depths)
            .flat_map(|d| &d.visuals)
            .find(|v| v.visual_id == image.visual)
            .ok_or_else(|| unsupported(format.bits_per_pixel))?;
        let (w, h) = (self.frame.screen.0 as usize, self.frame.screen.1 as usize);
        let pad = usize::from(format.scanline_pad.max(8));
        let stride = (w * usize::from(format.bits_per_pixel)).div_ceil(pad) * pad / 8;
        if image.data.len() < stride * h {
            return Err(unsupported(format.bits_per_pixel));
        }
        let lsb = setup.image_byte_order == ImageOrder::LSB_FIRST;
        let channel = |pixel: u32, mask: u32| -> u8 {
            let shift = mask.trailing_zeros();
            let max = mask >> shift;
            ((u64::from((pixel & mask) >> shift) * 255) / u64::from(max.max(1))) as u8
        };
        let mut rgb = Vec::with_capacity(w * h * 3);
        for row in image.data.chunks(stride).take(h) {
            for px in row.chunks(bytes).take(w) {
                let pixel = if lsb {
                    px.iter().rev().fold(0u32, |a, b| (a << 8) | u32::from(*b))
                } else {
                    px.iter().fold(0u32, |a, b| (a << 8) | u32::from(*b))
                };
                rgb.push(channel(pixel, visual.red_mask));
                rgb.push(channel(pixel, visual.green_mask));
                rgb.push(channel(pixel, visual.blue_mask));
            }
        }
        Ok(rgb)
    }
}

/// The server's keyboard map: which keysyms each keycode carries, column 0 plain, column 1
/// with shift.
struct Keymap {
    min_keycode: u8,
    per_keycode: usize,
    keysyms: Vec<u32>,
}

impl Keymap {
    fn read(conn: &RustConnection) -> Result<Keymap, ComputerError> {
        let setup = conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let reply = conn.get_keyboard_mapping(min, max - min + 1)?.reply()?;
        Ok(Keymap {
            min_keycode: min,
            per_keycode: usize::from(reply.keysyms_per_keycode.max(1)),
            keysyms: reply.keysyms,
        })
    }

    /// The keycode that makes `keysym` and whether it needs shift; plain columns win.
    fn keycode(&self, keysym: u32) -> Result<(u8, bool), ComputerError> {
        for column in 0..self.per_keycode.min(2) {
            let found = self
                .keysyms
                .chunks(self.per_keycode)
                .position(|syms| syms.get(column) == Some(&keysym));
            if let Some(index) = found
                && let Ok(offset) = u8::try_from(index)
            {
                return Ok((self.min_keycode.saturating_add(offset), column == 1));
            }
        }
        // Maps that list only the lowercase letter leave the capital to shift.
        if (0x41..=0x5a).contains(&keysym) {
            let (code, _) = self.keycode(keysym + 0x20)?;
            return Ok((code, true));
        }
        Err(ComputerError::Unmapped(
            char::from_u32(keysym)
                .filter(|c| !c.is_control())
                .map_or_else(|| format!("keysym {keysym:#x}"), |c| c.to_string()),
        ))
    }
}
