//! Output files written whole: each is written under a temporary name in
//! its own folder, then renamed over its final name once complete. A run
//! killed midway leaves the previous file or none, never a truncated one
//! (a rename within one folder is atomic on POSIX file systems). Also says,
//! before anything runs, why a path cannot take an output file or folder.
//! Knows nothing of what the files hold.

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

/// Lets `write` fill a temporary file beside `path` (creating its folder
/// first), then renames it to `path`; on any failure the temporary file is
/// removed and `path` is left as it was. `io_error` turns a failed folder
/// creation or rename into `write`'s error.
pub fn replace<E>(path: &Path, write: impl FnOnce(&Path) -> Result<(), E>, io_error: impl Fn(io::Error) -> E) -> Result<(), E> {
    if let Some(folder) = path.parent().filter(|folder| !folder.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder).map_err(&io_error)?;
    }
    let temporary = temporary_beside(path);
    let written = write(&temporary).and_then(|()| std::fs::rename(&temporary, path).map_err(&io_error));
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

/// Why no output folder can be at `dir`, if none can: something other
/// than a folder is in the way, or no folder can be created where the path
/// leaves the existing ones. Creates nothing that stays (it tries creating,
/// and removes, a hidden folder in the nearest existing one).
pub fn unusable_folder(dir: &Path) -> Option<String> {
    let mut existing = Path::new(".");
    for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
        match std::fs::metadata(ancestor) {
            Ok(found) if found.is_dir() => {
                existing = ancestor;
                break;
            }
            Ok(_) => return Some(format!("{} is not a folder", ancestor.display())),
            Err(_) => continue,
        }
    }
    let probe = existing.join(format!(".icsim-probe.{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    match std::fs::create_dir(&probe) {
        Ok(()) => {
            // Only the probe just made is removed.
            let _ = std::fs::remove_dir(&probe);
            None
        }
        Err(error) => Some(format!("no folder can be created in {} ({error})", existing.display())),
    }
}

/// Why no output file can be written at `path`, if none can: it names a
/// folder or something other than a regular file (a device, `/dev/null`),
/// or its folder is unusable (see [`unusable_folder`]).
pub fn unusable_file(path: &Path) -> Option<String> {
    if path.file_name().is_none() || path.as_os_str().to_string_lossy().ends_with('/') {
        return Some("names a folder, not a file".into());
    }
    match std::fs::metadata(path) {
        Ok(found) if found.is_dir() => return Some("is a folder, not a file".into()),
        Ok(found) if !found.is_file() => return Some("is not a regular file (a device or a pipe) that a file could replace".into()),
        _ => {}
    }
    unusable_folder(path.parent().unwrap_or(Path::new(".")))
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

    #[test]
    fn output_paths_are_judged_without_leaving_anything() {
        let dir = std::env::temp_dir().join(format!("icsim-outputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("afile");
        std::fs::write(&file, "x").unwrap();
        assert_eq!(unusable_folder(&dir.join("new/deeper")), None, "a folder that can be created");
        assert_eq!(unusable_file(&dir.join("new/x.toml")), None, "a file whose folder can be created");
        let in_the_way = unusable_folder(&file.join("x")).unwrap();
        assert!(in_the_way.contains("afile") && in_the_way.contains("not a folder"), "{in_the_way}");
        assert!(unusable_folder(&file).unwrap().contains("not a folder"));
        assert!(unusable_folder(Path::new("/proc/nope/x")).unwrap().contains("/proc"), "nothing is created under /proc");
        assert!(unusable_file(&dir).unwrap().contains("is a folder"));
        assert!(unusable_file(Path::new("/dev/null")).unwrap().contains("regular file"));
        assert_eq!(unusable_file(&file), None, "an existing file is replaced");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "the probes are gone");
        write_whole(&dir.join("made/x.txt"), "x").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
