//! Which device: the Vulkan loader and instance, the usable devices ranked (discrete GPU first,
//! then integrated, virtual, CPU), [`Context::list_devices`], and the choice by index, name or
//! UUID as NVIDIA's tools write it. Opens instances only; the device itself is opened in `mod.rs`.
//! May touch the Vulkan loader and instance, the context options and the crate's errors.

use super::{Capabilities, Context, ContextOptions, ENV_DEVICE, HOST_SELECTOR};
use crate::error::{Error, Result, VkContext};
use ash::vk;
use std::ffi::CString;

/// One line per Vulkan device: `index: name (type)`.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Position in the enumeration, usable as a selector.
    pub index: usize,
    /// Driver-reported name.
    pub name: String,
    /// Discrete GPU, integrated GPU, CPU, ...
    pub device_type: String,
    /// The device's UUID as `GPU-…` (see [`Capabilities::uuid`](super::Capabilities::uuid)),
    /// usable as a selector.
    pub uuid: String,
}

fn type_rank(t: vk::PhysicalDeviceType) -> u32 {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

pub(super) fn type_name(t: vk::PhysicalDeviceType) -> &'static str {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => "discrete GPU",
        vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated GPU",
        vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual GPU",
        vk::PhysicalDeviceType::CPU => "CPU",
        _ => "other",
    }
}

pub(super) fn version_string(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

pub(super) fn load_entry() -> Result<ash::Entry> {
    unsafe { ash::Entry::load() }.map_err(|e| {
        Error::NoDevice(format!(
            "cannot load the Vulkan loader (libvulkan.so.1): {e}; on Debian: apt-get install libvulkan1 mesa-vulkan-drivers"
        ))
    })
}

pub(super) fn create_instance(entry: &ash::Entry, validation: bool) -> Result<ash::Instance> {
    let app = CString::new("diversity").unwrap_or_default();
    let app_info = vk::ApplicationInfo::default()
        .application_name(&app)
        .engine_name(&app)
        .api_version(vk::API_VERSION_1_2);
    let layer = c"VK_LAYER_KHRONOS_validation";
    let mut layers = Vec::new();
    let mut exts = Vec::new();
    if validation {
        let available = unsafe { entry.enumerate_instance_layer_properties() }
            .vk("vkEnumerateInstanceLayerProperties")?;
        if !available
            .iter()
            .any(|l| l.layer_name_as_c_str().ok() == Some(layer))
        {
            return Err(Error::NoDevice(
                "validation requested but VK_LAYER_KHRONOS_validation is not installed (Debian: apt-get install vulkan-validationlayers)".into(),
            ));
        }
        layers.push(layer.as_ptr());
        exts.push(ash::ext::debug_utils::NAME.as_ptr());
    }
    let info = vk::InstanceCreateInfo::default()
        .application_info(&app_info)
        .enabled_layer_names(&layers)
        .enabled_extension_names(&exts);
    match unsafe { entry.create_instance(&info, None) } {
        // The loader found no driver: no Vulkan device on this machine.
        Err(vk::Result::ERROR_INCOMPATIBLE_DRIVER) => Err(Error::NoDevice(
            "the Vulkan loader found no driver (ICD) on this machine (for a CPU device: \
             apt-get install mesa-vulkan-drivers)"
                .into(),
        )),
        r => r.vk("vkCreateInstance"),
    }
}

/// A usable device: its handle, name, type and UUID.
pub(super) type Ranked = (vk::PhysicalDevice, String, vk::PhysicalDeviceType, [u8; 16]);

/// Usable devices (Vulkan ≥ 1.2 with a compute queue), best first.
fn ranked_devices(instance: &ash::Instance) -> Result<Vec<Ranked>> {
    let mut devs = Vec::new();
    for pd in unsafe { instance.enumerate_physical_devices() }.vk("vkEnumeratePhysicalDevices")? {
        let p = unsafe { instance.get_physical_device_properties(pd) };
        let name = p
            .device_name_as_c_str()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if p.api_version < vk::API_VERSION_1_2 {
            continue;
        }
        let qf = unsafe { instance.get_physical_device_queue_family_properties(pd) };
        if !qf
            .iter()
            .any(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
        {
            continue;
        }
        let mut id = vk::PhysicalDeviceIDProperties::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut id);
        unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
        devs.push((pd, name, p.device_type, id.device_uuid));
    }
    devs.sort_by_key(|d| type_rank(d.2));
    Ok(devs)
}

/// The selector `opts` names, else [`ENV_DEVICE`]'s (empty counts as none).
pub fn device_selector(opts: &ContextOptions) -> Option<String> {
    opts.device
        .clone()
        .or_else(|| std::env::var(ENV_DEVICE).ok())
        .filter(|s| !s.is_empty())
}

/// Whether a context opened with `opts` on a device of `caps` runs diversity sequences on the
/// host engine: the selector is [`HOST_SELECTOR`], or there is none and the device is a CPU
/// device (naming a device, lavapipe included, runs its shaders).
pub(super) fn native_host(opts: &ContextOptions, caps: &Capabilities) -> bool {
    match device_selector(opts) {
        Some(s) => s.eq_ignore_ascii_case(HOST_SELECTOR),
        None => super::is_cpu_device(caps),
    }
}

/// The device `opts` names (or [`ENV_DEVICE`], else the best ranked), by [`select_device`]'s
/// rule: an index, a UUID or an unambiguous part of its name.
pub(super) fn choose(instance: &ash::Instance, opts: &ContextOptions) -> Result<Ranked> {
    let devs = ranked_devices(instance)?;
    if devs.is_empty() {
        return Err(Error::NoDevice(
            "no Vulkan 1.2 device with a compute queue (for a CPU device: apt-get install mesa-vulkan-drivers)".into(),
        ));
    }
    let wanted = device_selector(opts).filter(|s| !s.eq_ignore_ascii_case(HOST_SELECTOR));
    let chosen = match &wanted {
        None => &devs[0],
        Some(sel) => {
            let listed: Vec<(usize, String, String)> = devs
                .iter()
                .enumerate()
                .map(|(i, d)| (i, d.1.clone(), uuid_string(&d.3)))
                .collect();
            &devs[select_device(sel, &listed).map_err(Error::NoDevice)?]
        }
    };
    Ok(chosen.clone())
}

impl Context {
    /// Every usable Vulkan device, in the order the default choice ranks them.
    pub fn list_devices() -> Result<Vec<DeviceInfo>> {
        let entry = load_entry()?;
        let instance = create_instance(&entry, false)?;
        let devs = ranked_devices(&instance);
        unsafe { instance.destroy_instance(None) };
        Ok(devs?
            .into_iter()
            .enumerate()
            .map(|(index, (_, name, t, uuid))| DeviceInfo {
                index,
                name,
                device_type: type_name(t).into(),
                uuid: uuid_string(&uuid),
            })
            .collect())
    }
}

/// A device UUID as NVIDIA's tools write a GPU's: `GPU-` and the 16 bytes as lowercase hex
/// digits in groups of 8-4-4-4-12 (`GPU-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6`).
pub fn uuid_string(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Whether a device selector names a device by UUID (`GPU-…` or `MIG-…`, any case) rather than
/// by index or name: such a selector goes to [`match_uuid`] and is never taken as a name.
pub fn is_uuid_selector(sel: &str) -> bool {
    let s = sel.trim().as_bytes();
    s.len() >= 4 && (s[..4].eq_ignore_ascii_case(b"GPU-") || s[..4].eq_ignore_ascii_case(b"MIG-"))
}

/// The index of the one device of `devices` (index, name, UUID as [`uuid_string`] writes it)
/// that the selector `sel` names, by one rule everywhere a device is chosen (`--device`,
/// `DIVERSITY_DEVICE`, `open { device = … }`, each item of a `--devices` list):
///
/// - a whole number (ASCII digits only) is an index, and only an index: one past the last
///   device is refused, never read as part of a name;
/// - `GPU-…` / `MIG-…` is a UUID ([`match_uuid`]);
/// - anything else is a name: the devices whose names contain it (case ignored), or failing
///   that equal it; exactly one must match. Several (two cards of one model) are refused:
///   name one by index or UUID;
/// - a selector that reads as a number but is no index (`-1`, `1.0`, `1e0`, `+2`) is refused,
///   not matched against names.
///
/// The refusal names the selector and lists the devices (index, name, UUID).
pub fn select_device(
    sel: &str,
    devices: &[(usize, String, String)],
) -> std::result::Result<usize, String> {
    let listing = || {
        device_listing(
            devices
                .iter()
                .map(|(i, name, uuid)| format!("{i}: {name} ({uuid})")),
        )
    };
    let t = sel.trim();
    if t.is_empty() {
        return Err(format!(
            "device selector '{sel}' is empty; devices: {}",
            listing()
        ));
    }
    if is_uuid_selector(t) {
        return match_uuid(t, devices).map_err(|e| match e {
            Error::NoDevice(m) | Error::Invalid(m) => m,
            e => e.to_string(),
        });
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return match t.parse::<usize>() {
            Ok(i) if i < devices.len() => Ok(i),
            _ => Err(format!(
                "index {t} is out of range ({} device{}, indices from 0); devices: {}",
                devices.len(),
                if devices.len() == 1 { "" } else { "s" },
                listing()
            )),
        };
    }
    if t.parse::<f64>().is_ok() || t.parse::<i128>().is_ok() {
        return Err(format!(
            "device selector '{sel}' is a number but not a device index (a whole number from 0 \
             to {}); devices: {}",
            devices.len().saturating_sub(1),
            listing()
        ));
    }
    let lower = t.to_lowercase();
    let mut found: Vec<usize> = (0..devices.len())
        .filter(|&k| devices[k].1.to_lowercase().contains(&lower))
        .collect();
    if found.len() > 1 {
        let exact: Vec<usize> = found
            .iter()
            .copied()
            .filter(|&k| devices[k].1.trim().eq_ignore_ascii_case(t))
            .collect();
        if exact.len() == 1 {
            found = exact;
        }
    }
    match found.as_slice() {
        [k] => Ok(devices[*k].0),
        [] => Err(format!(
            "no device name contains '{sel}'; devices: {}",
            listing()
        )),
        many => Err(format!(
            "'{sel}' matches {} devices ({}): name one by its index or UUID; devices: {}",
            many.len(),
            many.iter()
                .map(|&k| devices[k].0.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            listing()
        )),
    }
}

/// The devices as the selection errors list them: one entry each, joined by ", ", or "none".
pub(crate) fn device_listing(entries: impl Iterator<Item = String>) -> String {
    let all: Vec<String> = entries.collect();
    if all.is_empty() {
        "none".to_string()
    } else {
        all.join(", ")
    }
}

/// The index of the one device of `devices` (index, name, UUID as [`uuid_string`] writes it)
/// whose UUID `sel` names: `GPU-` (any case) then the UUID's hex digits, whole or a leading
/// part as long as it is unique (as `CUDA_VISIBLE_DEVICES` takes them), hyphens and case
/// ignored. Refused, naming the selector and listing the devices with their UUIDs: a selector
/// with no hex digits or a character that is not one, a MIG instance (`MIG-…`: Vulkan lists
/// whole GPUs only), a UUID no device has, and one that two devices match (a prefix too short,
/// or one GPU listed twice) — so that two tasks given two different GPUs never share one.
pub fn match_uuid(sel: &str, devices: &[(usize, String, String)]) -> Result<usize> {
    let listing = || {
        device_listing(
            devices
                .iter()
                .map(|(i, name, uuid)| format!("{i}: {name} ({uuid})")),
        )
    };
    let digits = |u: &str| -> String {
        u.chars()
            .filter(|c| *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let t = sel.trim();
    if t.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("MIG-")) {
        return Err(Error::NoDevice(format!(
            "'{sel}' is a MIG instance: Vulkan lists whole GPUs only, name the GPU by its \
             GPU-… UUID (nvidia-smi -L); devices: {}",
            listing()
        )));
    }
    let hex = match t.get(..4) {
        Some(p) if p.eq_ignore_ascii_case("GPU-") => digits(t.get(4..).unwrap_or_default()),
        _ => String::new(),
    };
    if hex.is_empty() || hex.len() > 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(Error::NoDevice(format!(
            "'{sel}' is not a GPU UUID: expected GPU- and up to 32 hex digits (e.g. \
             GPU-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6, as nvidia-smi -L prints it); devices: {}",
            listing()
        )));
    }
    let found: Vec<&(usize, String, String)> = devices
        .iter()
        .filter(|(_, _, uuid)| {
            uuid.get(..4)
                .is_some_and(|p| p.eq_ignore_ascii_case("GPU-"))
                && digits(uuid.get(4..).unwrap_or_default()).starts_with(&hex)
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one.0),
        [] => Err(Error::NoDevice(format!(
            "no device has the UUID '{sel}'; devices: {}",
            listing()
        ))),
        many => Err(Error::NoDevice(format!(
            "the UUID '{sel}' matches {} devices ({}): {}",
            many.len(),
            many.iter()
                .map(|(i, name, uuid)| format!("{i}: {name} ({uuid})"))
                .collect::<Vec<_>>()
                .join(", "),
            if hex.len() < 32 {
                "give more of the UUID"
            } else {
                "one GPU is listed more than once (by two Vulkan drivers?); keep one driver \
                 (VK_DRIVER_FILES)"
            }
        ))),
    }
}

#[cfg(test)]
mod uuid_tests {
    use super::*;

    const A: &str = "GPU-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6";
    const B: &str = "GPU-5f0c9999-0000-4000-8000-000000000001";
    const C: &str = "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d";

    /// Three fake devices as `Context::list_devices` would list them.
    fn fake() -> Vec<(usize, String, String)> {
        [
            (0, "NVIDIA H200", A),
            (1, "NVIDIA H200", B),
            (2, "llvmpipe", C),
        ]
        .iter()
        .map(|&(i, n, u)| (i, n.to_string(), u.to_string()))
        .collect()
    }

    #[test]
    fn uuid_string_is_nvidia_smi_form() {
        let mut u = [0u8; 16];
        for (i, b) in u.iter_mut().enumerate() {
            *b = (i as u8) * 17;
        }
        assert_eq!(uuid_string(&u), "GPU-00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(uuid_string(&[0; 16]).len(), 40);
    }

    #[test]
    fn selectors_that_are_uuids() {
        for s in [A, "gpu-5f", " GPU-5f0c2f3a", "MIG-1234", "mig-GPU-5f0c/1/0"] {
            assert!(is_uuid_selector(s), "{s}");
        }
        for s in ["0", "llvmpipe", "NVIDIA", "GPU", "gpu0", "", "é"] {
            assert!(!is_uuid_selector(s), "{s}");
        }
    }

    #[test]
    fn matches_by_uuid() {
        let d = fake();
        // (selector, the device it names)
        let ok: &[(&str, usize)] = &[
            (A, 0),
            (B, 1),
            (C, 2),
            // upper and mixed case, surrounding blanks
            ("GPU-5F0C2F3A-1B2C-3D4E-8F90-A1B2C3D4E5F6", 0),
            ("gpu-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6", 0),
            ("  GPU-0A1B2C3D-4e5f-6a7b-8c9d-0e1f2a3b4c5d\n", 2),
            // unique leading parts, as CUDA_VISIBLE_DEVICES takes them
            ("GPU-5f0c2f3a", 0),
            ("GPU-5f0c2", 0),
            ("GPU-5f0c9", 1),
            ("GPU-0", 2),
            // hyphens ignored
            ("GPU-5f0c2f3a1b2c3d4e8f90a1b2c3d4e5f6", 0),
        ];
        for &(sel, want) in ok {
            assert_eq!(match_uuid(sel, &d).unwrap(), want, "{sel}");
        }
    }

    #[test]
    fn refuses_what_names_no_single_device() {
        let d = fake();
        // (selector, words the message must hold)
        let bad: &[(&str, &[&str])] = &[
            // no device
            (
                "GPU-ffffffff-1b2c-3d4e-8f90-a1b2c3d4e5f6",
                &[
                    "no device has the UUID 'GPU-ffffffff",
                    "0: NVIDIA H200 (GPU-5f0c2f3a",
                ],
            ),
            // two devices share the prefix
            (
                "GPU-5f0c",
                &[
                    "matches 2 devices",
                    "0: NVIDIA H200",
                    "1: NVIDIA H200",
                    "give more",
                ],
            ),
            // not hex, empty, too long
            ("GPU-", &["'GPU-' is not a GPU UUID"]),
            ("GPU-xyz", &["'GPU-xyz' is not a GPU UUID", "2: llvmpipe"]),
            (
                "GPU-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f60",
                &["is not a GPU UUID", "up to 32 hex digits"],
            ),
            // a MIG instance (both of nvidia-smi's forms)
            (
                "MIG-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6",
                &["MIG instance", "whole GPUs"],
            ),
            (
                "MIG-GPU-5f0c2f3a-1b2c-3d4e-8f90-a1b2c3d4e5f6/1/0",
                &["MIG instance"],
            ),
        ];
        for &(sel, words) in bad {
            let e = match_uuid(sel, &d).unwrap_err().to_string();
            for w in words {
                assert!(e.contains(w), "{sel}: {e:?} lacks {w:?}");
            }
        }
        // One GPU listed twice (two drivers): the whole UUID matches both.
        let mut twice = fake();
        twice.push((3, "NVIDIA H200".into(), A.into()));
        let e = match_uuid(A, &twice).unwrap_err().to_string();
        assert!(
            e.contains("matches 2 devices") && e.contains("3: NVIDIA H200"),
            "{e}"
        );
        assert!(e.contains("listed more than once"), "{e}");
        // No devices at all.
        let e = match_uuid(A, &[]).unwrap_err().to_string();
        assert!(e.contains("devices: none"), "{e}");
    }

    /// One rule for every selector: a whole number is an index only (never a piece of a name:
    /// "1" once chose "llvmpipe (LLVM 15.0.6, 256 bits)" on a one-device machine), a number
    /// that is no index is refused, a name must match one device.
    #[test]
    fn selectors_choose_one_device_or_are_refused() {
        let d = fake();
        assert_eq!(select_device("0", &d), Ok(0));
        assert_eq!(select_device(" 2 ", &d), Ok(2));
        assert_eq!(select_device("LLVMpipe", &d), Ok(2));
        assert_eq!(select_device(&C.to_lowercase(), &d), Ok(2));
        assert_eq!(select_device("GPU-5f0c2f", &d), Ok(0));
        // The names of several devices: refused, naming them; an exact name settles it.
        let e = select_device("H200", &d).unwrap_err();
        assert!(
            e.contains("matches 2 devices (0, 1)") && e.contains("by its index or UUID"),
            "{e}"
        );
        let e = select_device("nvidia h200", &d).unwrap_err();
        assert!(e.contains("matches 2 devices"), "{e}");
        let mut one = fake();
        one.push((
            3,
            "NVIDIA H200 NVL".into(),
            "GPU-ffff0000-0000-4000-8000-000000000009".into(),
        ));
        one.remove(1);
        assert_eq!(
            select_device("NVIDIA H200", &one),
            Ok(0),
            "the exact name among longer ones"
        );
        let lavapipe = vec![(
            0,
            "llvmpipe (LLVM 15.0.6, 256 bits)".to_string(),
            C.to_string(),
        )];
        for sel in ["1", "2", "5", "3", "8", "99999999999999999999999"] {
            let e = select_device(sel, &lavapipe).unwrap_err();
            assert!(
                e.contains(&format!("index {sel} is out of range (1 device")),
                "{sel}: {e}"
            );
            assert!(
                e.contains("0: llvmpipe (LLVM 15.0.6, 256 bits) (GPU-0a1b2c3d"),
                "{e}"
            );
        }
        for sel in ["-1", "+0", "1.0", "1e0", "0.5", " -0 "] {
            let e = select_device(sel, &lavapipe).unwrap_err();
            assert!(
                e.contains("is a number but not a device index"),
                "{sel}: {e}"
            );
        }
        for sel in ["", "  "] {
            let e = select_device(sel, &lavapipe).unwrap_err();
            assert!(e.contains("is empty"), "{sel:?}: {e}");
        }
        let e = select_device("radeon", &lavapipe).unwrap_err();
        assert!(
            e.contains("no device name contains 'radeon'; devices: 0: llvmpipe"),
            "{e}"
        );
        let e = select_device("GPU-ffff", &lavapipe).unwrap_err();
        assert!(e.contains("no device has the UUID"), "{e}");
        // Eight cards of one model: each by index, none by the shared name.
        let node: Vec<(usize, String, String)> = (0..8)
            .map(|i| {
                (
                    i,
                    "NVIDIA H100 80GB HBM3".to_string(),
                    format!("GPU-{i:08x}-0000-4000-8000-000000000000"),
                )
            })
            .collect();
        assert_eq!(select_device("7", &node), Ok(7));
        assert!(select_device("8", &node)
            .unwrap_err()
            .contains("index 8 is out of range (8 devices"));
        assert!(select_device("H100", &node)
            .unwrap_err()
            .contains("matches 8 devices"));
        assert!(select_device("NVIDIA H100 80GB HBM3", &node)
            .unwrap_err()
            .contains("matches 8 devices"));
    }
}
