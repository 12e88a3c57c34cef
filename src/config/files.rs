//! Reading the files a config names (prompt files, image files, CA files) and the config
//! file itself, with a byte cap and only from regular files.
//!
//! Why: `prompts: {file: /dev/zero}` once read 2 GB in a second, and a FIFO made `check`
//! wait forever for a writer. So a named file must be a regular file (checked before
//! opening, and again on the open handle, in case it was swapped meanwhile), is opened
//! with `O_NONBLOCK` (opening a FIFO then never waits; on a regular file the flag does
//! nothing), and is read up to its cap and no further (a regular file may still grow, or
//! claim size 0 as files in /proc do).

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::path::Path;

/// A prompt file: thousands of prompts fit in far less.
pub const MAX_PROMPT_FILE_BYTES: u64 = 1 << 20;
/// A PEM bundle of CA certificates (the whole Mozilla set is about 220 KB).
pub const MAX_CA_FILE_BYTES: u64 = 1 << 20;
/// An image file to send: a 50-megapixel phone photo is about 20 MB.
pub const MAX_IMAGE_FILE_BYTES: u64 = 64 << 20;
/// `probes.yaml` itself: 10,000 probes take about 3 MB.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("is {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("is larger than {0} bytes")]
    TooLarge(u64),
}

/// The whole of a regular file of at most `cap` bytes.
pub fn read_regular(path: &Path, cap: u64) -> Result<Vec<u8>, FileError> {
    regular(&std::fs::metadata(path)?)?;
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    regular(&file.metadata()?)?;
    read_capped(file, cap)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_text(path: &Path, cap: u64) -> Result<String, FileError> {
    text(read_regular(path, cap)?)
}

/// The config file: a regular file or a pipe (`-c <(envsubst < probes.yaml)` is a
/// pipe, and its writer is the user's own), of at most [`MAX_CONFIG_BYTES`].
pub fn read_config_text(path: &Path) -> Result<String, FileError> {
    let meta = std::fs::metadata(path)?;
    if !is_fifo(&meta) {
        regular(&meta)?;
    }
    text(read_capped(File::open(path)?, MAX_CONFIG_BYTES)?)
}

fn read_capped(file: File, cap: u64) -> Result<Vec<u8>, FileError> {
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(FileError::TooLarge(cap));
    }
    Ok(bytes)
}

fn text(bytes: Vec<u8>) -> Result<String, FileError> {
    String::from_utf8(bytes).map_err(|_| {
        FileError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })
}

fn regular(meta: &Metadata) -> Result<(), FileError> {
    if meta.is_file() {
        return Ok(());
    }
    Err(FileError::NotRegular(kind(meta)))
}

fn is_fifo(meta: &Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        meta.file_type().is_fifo()
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        false
    }
}

/// What a non-regular file is, for messages.
pub(crate) fn kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "a special file"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("inferprobe-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn devices_and_directories_are_refused_before_a_byte_is_read() {
        for (path, kind) in [
            ("/dev/zero", "a character device"),
            ("/dev/null", "a character device"),
            ("/", "a directory"),
        ] {
            let e = read_regular(Path::new(path), 10).unwrap_err();
            assert_eq!(e.to_string(), format!("is {kind}, not a regular file"), "{path}");
        }
        // The config file may be a pipe, but not a device.
        let e = read_config_text(Path::new("/dev/zero")).unwrap_err();
        assert!(matches!(e, FileError::NotRegular("a character device")), "{e}");
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = temp("fifo");
        let fifo = dir.join("prompts.txt");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "mkfifo missing under CI"
            );
            println!("SKIP: mkfifo is not available");
            return;
        }
        // On the old code this blocked forever in open(2).
        let e = read_regular(&fifo, 10).unwrap_err();
        assert!(matches!(e, FileError::NotRegular("a FIFO")), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn files_are_read_up_to_their_cap_and_no_further() {
        let dir = temp("cap");
        let file = dir.join("big.txt");
        std::fs::write(&file, vec![b'a'; 1025]).unwrap();
        assert_eq!(read_regular(&file, 1025).unwrap().len(), 1025);
        assert!(matches!(
            read_regular(&file, 1024),
            Err(FileError::TooLarge(1024))
        ));
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(
            read_regular_text(&file, 10)
                .unwrap_err()
                .to_string()
                .contains("UTF-8")
        );
        // Files in /proc claim size 0 and are read by the byte cap alone.
        if Path::new("/proc/self/status").exists() {
            assert!(matches!(
                read_regular(Path::new("/proc/self/status"), 16),
                Err(FileError::TooLarge(16))
            ));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
