//! Finding CUDA's math libraries (cuBLAS, NVRTC) at run time, as they are
//! installed beside PyTorch or a CUDA toolkit: a path the user names
//! (`$CUBLAS_LIB`, `$NVRTC_LIB`), the names the dynamic linker knows (newest
//! major version first), the `lib/` folders of python3's `nvidia.*` packages
//! (pip's CUDA 12 wheels keep `nvidia/cublas/lib/libcublas.so.12`, CUDA 13
//! ones `nvidia/cu13/lib/libcublas.so.13`) and of torch, and the usual
//! toolkit folders. cudarc's own loader tries `libcublas.so.12` and older
//! only (and panics when nothing loads), so the runner loads them itself.
//! Knows nothing of what is measured.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use libloading::Library;

/// A loaded library and where it came from.
pub struct Loaded {
    pub library: Library,
    /// The file, or the name the dynamic linker resolved.
    pub location: String,
    /// Libraries it needs, loaded first from its folder; kept loaded.
    _companions: Vec<Library>,
}

/// Major versions tried by name, newest first.
const MAJORS: [u32; 4] = [13, 12, 11, 10];

/// Folders where pip's CUDA wheels, torch and CUDA toolkits keep libraries.
fn library_folders() -> Vec<PathBuf> {
    const FIND: &str = "import importlib.util as u, os\nfor n in ('nvidia', 'torch'):\n    try:\n        for p in u.find_spec(n).submodule_search_locations:\n            print(n, p)\n    except Exception:\n        pass\n";
    let mut folders = Vec::new();
    if let Ok(output) = Command::new("python3").args(["-c", FIND]).stdin(Stdio::null()).stderr(Stdio::null()).output() {
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let Some((package, folder)) = line.split_once(' ') else { continue };
            let folder = PathBuf::from(folder.trim());
            if package == "torch" {
                folders.push(folder.join("lib"));
            } else if let Ok(entries) = std::fs::read_dir(&folder) {
                let mut subfolders: Vec<PathBuf> =
                    entries.filter_map(|e| e.ok().map(|e| e.path().join("lib"))).filter(|p| p.is_dir()).collect();
                subfolders.sort();
                folders.extend(subfolders);
            }
        }
    }
    folders.extend(["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu"].map(PathBuf::from));
    folders
}

/// Files in `folder` that are `stem` (`libcublas`) with a `.so` version
/// suffix, newest version first; `libcublasLt` is not `libcublas`.
pub fn versioned_files(folder: &Path, stem: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else { return Vec::new() };
    let mut files: Vec<(Vec<u32>, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let version = name.strip_prefix(stem)?.strip_prefix(".so")?;
            let numbers: Option<Vec<u32>> = version.split('.').filter(|s| !s.is_empty()).map(|s| s.parse().ok()).collect();
            Some((numbers?, entry.path()))
        })
        .collect();
    files.sort_by(|a, b| b.0.cmp(&a.0));
    files.into_iter().map(|(_, path)| path).collect()
}

/// Loads the library `stem` (`libcublas`), with `companions` (`libcublasLt`)
/// from the same folder first; `variable` may name its file. Says what was
/// tried when nothing loads.
pub fn load(stem: &str, companions: &[&str], variable: &str) -> Result<Loaded, String> {
    let mut tried = Vec::new();
    let open = |path: &Path| -> Result<Loaded, String> {
        let folder = path.parent().unwrap_or(Path::new("."));
        let mut loaded = Vec::new();
        for companion in companions {
            if let Some(file) = versioned_files(folder, companion).into_iter().next() {
                // SAFETY: loading a CUDA library runs only its own initializers.
                loaded.extend(unsafe { Library::new(&file) }.ok());
            }
        }
        // SAFETY: as above.
        let library = unsafe { Library::new(path) }.map_err(|e| e.to_string())?;
        Ok(Loaded { library, location: path.display().to_string(), _companions: loaded })
    };
    if let Some(path) = std::env::var_os(variable).filter(|v| !v.is_empty()).map(PathBuf::from) {
        return open(&path).map_err(|e| format!("{variable}={}: {e}", path.display()));
    }
    for major in MAJORS {
        let name = format!("{stem}.so.{major}");
        // SAFETY: as above.
        match unsafe { Library::new(&name) } {
            Ok(library) => return Ok(Loaded { library, location: name, _companions: Vec::new() }),
            Err(_) => tried.push(name),
        }
    }
    for folder in library_folders() {
        for file in versioned_files(&folder, stem) {
            match open(&file) {
                Ok(loaded) => return Ok(loaded),
                Err(error) => tried.push(format!("{} ({error})", file.display())),
            }
        }
    }
    Err(format!(
        "{stem} not found: tried {}; install PyTorch's CUDA wheels (pip install torch) or a CUDA toolkit, or set {variable} to the library's path",
        tried.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_files_are_the_library_and_not_its_namesakes_newest_first() {
        let dir = std::env::temp_dir().join(format!("icsim-libs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["libcublas.so.12", "libcublas.so.13", "libcublasLt.so.13", "libcublas.so.13.0.2", "libcublas.txt"] {
            std::fs::write(dir.join(name), "").unwrap();
        }
        let names: Vec<String> =
            versioned_files(&dir, "libcublas").iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["libcublas.so.13.0.2", "libcublas.so.13", "libcublas.so.12"]);
        let Err(error) = load("libcublas-none", &[], "ICSIM_TEST_UNSET_VARIABLE") else { panic!("nothing of that name loads") };
        assert!(error.contains("libcublas-none.so.13"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
