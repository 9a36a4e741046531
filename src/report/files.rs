//! Output files written whole, one by one or as a set. A single file is
//! written under a temporary name in its own folder, then renamed over its
//! final name once complete: a run killed midway leaves the previous file
//! or none, never a truncated one (a rename within one folder is atomic on
//! POSIX file systems).
//!
//! A set (a run's results and plots, a sweep's manifest, rows and plots)
//! is one unit, committed like a database transaction with a redo record.
//! Its files are written into a staging folder beside them,
//! `DIR/.icsim-set.PID-N`, and synced to disk with that folder; then the
//! commit record `.commit` is written into it (synced, and renamed into
//! place: the set is committed at that one rename). Only then are the files
//! renamed into `DIR` one by one, the files of the previous set that the new
//! one lacks removed (each set lists its files in `DIR/.icsim-set`), `DIR`
//! synced, and the staging folder removed. Whoever opens the folder next
//! through [`begin_set`] or [`recover`] (the next run, `sweep merge`)
//! finishes a committed set that a kill interrupted and removes an
//! uncommitted one, so icsim only ever reads the old set whole or the new
//! set whole; staging folders and temporary files of live processes are
//! left alone. A folder swap would give the same to every reader, but an
//! output folder is shared (a sweep's shards are subfolders of its
//! `output_dir`; `--out .` is allowed), so the files move, not the folder.
//! Sweeps write their fingerprint into every result file, so that a mix
//! made by other means is caught too (`sweep::output::merge`).
//!
//! Also says, before anything runs, why a path cannot take an output file
//! or folder. Knows nothing of what the files hold.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
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

/// Prefix of a set's staging folder beside its files.
const STAGING: &str = ".icsim-set.";
/// The list of the files of the set in a folder, one name a line.
const INDEX: &str = ".icsim-set";
/// The commit record in a staging folder: the previous set's files that
/// the new one lacks, one name a line.
const COMMIT: &str = ".commit";

/// A set of files being staged for `dir` (see the module).
#[derive(Debug)]
pub struct FileSet {
    dir: PathBuf,
    staging: PathBuf,
}

/// Test hook: with `ICSIM_ABORT_AFTER_FILE_OPS=N` in the environment, the
/// process aborts right after the Nth operation on a set's files (a write,
/// a sync, a rename or a removal), as a kill would leave it. Read once; in
/// a normal run one look at a cached `None` per operation.
fn file_operation_done() {
    static LIMIT: OnceLock<Option<u64>> = OnceLock::new();
    static DONE: AtomicU64 = AtomicU64::new(0);
    let limit = LIMIT.get_or_init(|| std::env::var("ICSIM_ABORT_AFTER_FILE_OPS").ok().and_then(|n| n.parse().ok()));
    if let Some(limit) = *limit
        && DONE.fetch_add(1, Ordering::Relaxed) + 1 >= limit
    {
        std::process::abort();
    }
}

fn sync(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()?;
    file_operation_done();
    Ok(())
}

fn rename(from: &Path, to: &Path) -> io::Result<()> {
    fs::rename(from, to)?;
    file_operation_done();
    Ok(())
}

/// The process id a temporary name of [`temporary_beside`] or a staging
/// folder carries, if `name` is one.
fn writer_of(name: &str) -> Option<u32> {
    let unique = match name.strip_prefix(STAGING) {
        Some(unique) => unique,
        None => name.strip_prefix('.')?.split('.').rev().skip_while(|&part| part != "partial").nth(1)?,
    };
    unique.split('-').next()?.parse().ok()
}

/// Whether process `pid` may still be writing: it is this one, or it runs
/// (where `/proc` cannot tell, every process is taken to run).
fn may_be_writing(pid: u32) -> bool {
    pid == std::process::id() || !Path::new("/proc/self").exists() || Path::new("/proc").join(pid.to_string()).exists()
}

fn names_in(text: &str) -> BTreeSet<String> {
    text.lines().filter(|line| !line.is_empty()).map(String::from).collect()
}

/// Finishes what a killed run left in `dir`: a committed set is moved into
/// place, an uncommitted one and stray temporary files are removed (those
/// of processes still running are left alone). Nothing to do if `dir`
/// does not exist.
pub fn recover(dir: &Path) -> io::Result<()> {
    let Ok(entries) = fs::read_dir(dir) else { return Ok(()) };
    let mut left: Vec<(PathBuf, bool)> = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        match writer_of(&name) {
            Some(pid) if !may_be_writing(pid) => left.push((entry.path(), name.starts_with(STAGING))),
            _ => {}
        }
    }
    left.sort();
    for (path, staging) in left {
        if !staging {
            fs::remove_file(&path)?;
        } else if path.join(COMMIT).exists() {
            move_in(dir, &path)?;
        } else {
            fs::remove_dir_all(&path)?;
        }
        file_operation_done();
    }
    Ok(())
}

/// The second half of a commit, which [`recover`] redoes: moves a committed
/// staging folder's files into `dir`, removes what its commit record names,
/// syncs `dir` and removes the staging folder.
fn move_in(dir: &Path, staging: &Path) -> io::Result<()> {
    let stale = names_in(&fs::read_to_string(staging.join(COMMIT))?);
    let mut staged: Vec<PathBuf> = fs::read_dir(staging)?.map(|e| e.map(|e| e.path())).collect::<io::Result<_>>()?;
    staged.sort();
    for file in staged.iter().filter(|f| f.file_name().is_some_and(|n| n != COMMIT)) {
        rename(file, &dir.join(file.file_name().expect("a staged file has a name")))?;
    }
    for name in &stale {
        match fs::remove_file(dir.join(name)) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => file_operation_done(),
        }
    }
    sync(dir)?;
    fs::remove_dir_all(staging)?;
    file_operation_done();
    Ok(())
}

impl FileSet {
    /// Where the set's files are written until it is committed.
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// Writes the set's file `name` whole.
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> io::Result<PathBuf> {
        let path = self.staging.join(name);
        fs::write(&path, contents)?;
        file_operation_done();
        Ok(path)
    }

    /// Where the file staged at `staged` lies once the set is committed.
    pub fn placed(&self, staged: &Path) -> PathBuf {
        self.dir.join(staged.file_name().expect("a staged file has a name"))
    }

    /// Syncs every staged file, commits the set and moves it into place
    /// (see the module).
    pub fn commit(self) -> io::Result<()> {
        let mut names: Vec<String> =
            fs::read_dir(&self.staging)?.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned())).collect::<io::Result<_>>()?;
        names.sort();
        names.push(INDEX.into());
        self.write(INDEX, names.join("\n") + "\n")?;
        for name in &names {
            sync(&self.staging.join(name))?;
        }
        let previous = names_in(&fs::read_to_string(self.dir.join(INDEX)).unwrap_or_default());
        let stale: Vec<&str> = previous.iter().map(String::as_str).filter(|p| !names.iter().any(|n| n == p)).collect();
        let record = self.write(&format!("{COMMIT}.partial"), stale.iter().map(|name| format!("{name}\n")).collect::<String>())?;
        sync(&record)?;
        sync(&self.staging)?;
        rename(&record, &self.staging.join(COMMIT))?;
        sync(&self.staging)?;
        move_in(&self.dir, &self.staging)
    }

    /// Removes what was staged.
    fn abandon(self) {
        // Nothing of an abandoned set is kept; it may be partly gone.
        let _ = fs::remove_dir_all(&self.staging);
    }
}

/// Starts a set of files for `dir` (creating it): recovers what killed runs
/// left there, then makes an empty staging folder.
pub fn begin_set(dir: &Path) -> io::Result<FileSet> {
    fs::create_dir_all(dir)?;
    recover(dir)?;
    let unique = format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let staging = dir.join(format!("{STAGING}{unique}"));
    fs::create_dir(&staging)?;
    Ok(FileSet { dir: dir.to_path_buf(), staging })
}

/// Writes one set into `dir`: `fill` writes the files into the set (in
/// its staging folder) and returns them; once it succeeds the set is
/// committed and their final paths returned, in `fill`'s order. On any
/// failure nothing of the set stays. `io_error` turns a failed file
/// operation into `fill`'s error.
pub fn write_set<E>(
    dir: &Path,
    fill: impl FnOnce(&FileSet) -> Result<Vec<PathBuf>, E>,
    io_error: impl Fn(io::Error) -> E,
) -> Result<Vec<PathBuf>, E> {
    let set = begin_set(dir).map_err(&io_error)?;
    match fill(&set) {
        Ok(staged) => {
            let placed = staged.iter().map(|file| set.placed(file)).collect();
            set.commit().map_err(&io_error)?;
            Ok(placed)
        }
        Err(error) => {
            set.abandon();
            Err(error)
        }
    }
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
