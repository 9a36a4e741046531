//! Output files written whole: each is written under a temporary name in
//! its own folder, then renamed over its final name once complete. A run
//! killed midway leaves the previous file or none, never a truncated one
//! (a rename within one folder is atomic on POSIX file systems). Knows
//! nothing of what the files hold.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Tells apart the temporary files of one process (threads may write at once).
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A hidden name beside `path` for writing it: `.NAME.PID-N.partial.EXT`,
/// keeping the extension last for writers that choose a format by it.
pub fn temporary_beside(path: &Path) -> PathBuf {
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let extension = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    let unique = format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    path.with_file_name(format!(".{name}.{unique}.partial{extension}"))
}

/// Lets `write` fill a temporary file beside `path`, then renames it to
/// `path`; on any failure the temporary file is removed and `path` is
/// left as it was. `io_error` turns a failed rename into `write`'s error.
pub fn replace<E>(path: &Path, write: impl FnOnce(&Path) -> Result<(), E>, io_error: impl FnOnce(io::Error) -> E) -> Result<(), E> {
    let temporary = temporary_beside(path);
    let written = write(&temporary).and_then(|()| std::fs::rename(&temporary, path).map_err(io_error));
    if written.is_err() {
        // Nothing to keep of a half-written file; it may not even exist.
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// Writes `contents` to `path` whole (see the module).
pub fn write_whole(path: &Path, contents: impl AsRef<[u8]>) -> io::Result<()> {
    replace(path, |temporary| std::fs::write(temporary, contents.as_ref()), |error| error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary_one() {
        let dir = std::env::temp_dir().join(format!("icsim-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("results.json");
        write_whole(&path, "old").unwrap();
        let failed: Result<(), io::Error> = replace(
            &path,
            |temporary| {
                std::fs::write(temporary, "half")?;
                Err(io::Error::other("killed midway"))
            },
            |e| e,
        );
        assert!(failed.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "the temporary file is gone");
        write_whole(&path, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let temporary = temporary_beside(&dir.join("plot.png"));
        assert!(temporary.extension().is_some_and(|e| e == "png") && temporary.parent() == Some(dir.as_path()), "{temporary:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
