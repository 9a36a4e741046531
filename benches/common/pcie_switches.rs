//! A topology file of many GPUs under PCIe switches (32 GPUs a switch, one
//! CPU socket and its memory): the largest PCIe-only input within the
//! README's bounds, shared by the scale test and the simulation benchmark.

/// The TOML of `gpus` H100s under PCIe switches of 32 GPUs each, all on one
/// CPU socket with its memory.
pub fn pcie_switches(gpus: usize) -> String {
    let mut nodes = vec!["{ name = \"cpu0\", kind = \"cpu\" }".to_string(), "{ name = \"mem0\", kind = \"memory\" }".into()];
    let mut links = vec!["{ from = \"cpu0\", to = \"mem0\", kind = \"memory\" }".to_string()];
    for switch in 0..gpus / 32 {
        nodes.push(format!("{{ name = \"sw{switch}\", kind = \"pcie-switch\" }}"));
        links.push(format!("{{ from = \"sw{switch}\", to = \"cpu0\", kind = \"pcie\" }}"));
    }
    for gpu in 0..gpus {
        nodes.push(format!("{{ name = \"GPU{gpu}\", kind = \"gpu\" }}"));
        links.push(format!("{{ from = \"GPU{gpu}\", to = \"sw{}\", kind = \"pcie\" }}", gpu / 32));
    }
    format!(
        "name = \"pcie-{gpus}\"\ngpu = \"h100\"\nhost = \"spr-2s\"\nnode = [\n{}\n]\nlink = [\n{}\n]\n",
        nodes.join(",\n"),
        links.join(",\n")
    )
}
