//! The `ofi` MTL's parameters (Open MPI's `mtl_ofi_*` names), provider
//! selection and the tag mode's resolution.

use std::fmt;

use crate::tag::TagMode;

/// Open MPI 5's default exclusion list: the providers that are not
/// high-speed networks (so that by default the PML keeps ob1 over them;
/// `net` is libfabric 1.17's newer TCP provider, which would otherwise be
/// chosen on any Ethernet machine).
pub const DEFAULT_EXCLUDE: &str = "shm,sockets,tcp,udp,usnic,net";

/// The library file opened by default.
pub const DEFAULT_LIBRARY: &str = "libfabric.so.1";

/// The requested tag layout (`mtl_ofi_tag_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagModeParam {
    /// `auto`: `ofi_tag_full` when the provider has remote CQ data (at
    /// least 4 bytes) and `FI_DIRECTED_RECV`, else `ofi_tag_1`.
    Auto,
    /// One mode, forced.
    Forced(TagMode),
}

/// The parameters of [`super::OfiMtl::open`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfiParams {
    /// `mtl_ofi_provider_include`: comma list of providers to use (empty:
    /// any not excluded). Only one of include and a non-default exclude
    /// may be given.
    pub provider_include: String,
    /// `mtl_ofi_provider_exclude`: comma list of providers never used.
    pub provider_exclude: String,
    /// `mtl_ofi_tag_mode`.
    pub tag_mode: TagModeParam,
    /// `mtl_ofi_progress_event_cnt`: completions read per `fi_cq_read`.
    pub progress_event_cnt: usize,
    /// `mtl_ofi_enable_sep`: use a scalable endpoint.
    pub enable_sep: bool,
    /// `mtl_ofi_thread_grouping`: choose the scalable endpoint's context
    /// by communicator id.
    pub thread_grouping: bool,
    /// `mtl_ofi_num_ctxts`: contexts of the scalable endpoint.
    pub num_ctxts: usize,
    /// `mtl_ofi_library`: the libfabric library file to open.
    pub library: String,
    /// `mtl_ofi_wait_fd`: completion queues with a file-descriptor wait
    /// object, which idle waits sleep on.
    pub wait_fd: bool,
}

impl Default for OfiParams {
    fn default() -> Self {
        OfiParams {
            provider_include: String::new(),
            provider_exclude: DEFAULT_EXCLUDE.to_owned(),
            tag_mode: TagModeParam::Auto,
            progress_event_cnt: 100,
            enable_sep: false,
            thread_grouping: false,
            num_ctxts: 1,
            library: DEFAULT_LIBRARY.to_owned(),
            wait_fd: true,
        }
    }
}

/// The parameters: name, default, help (for `oxmpi-info`).
pub fn params() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        (
            "mtl_ofi_provider_include",
            "",
            "Comma-separated list of OFI providers to use (matched against each \
             ';'-separated part of the provider name, so \"tcp\" selects \"tcp;ofi_rxm\"); \
             empty: any provider not excluded. Cannot be combined with a non-default \
             mtl_ofi_provider_exclude",
        ),
        (
            "mtl_ofi_provider_exclude",
            DEFAULT_EXCLUDE,
            "Comma-separated list of OFI providers never used (matched as for \
             mtl_ofi_provider_include: \"tcp\" excludes \"tcp;ofi_rxm\")",
        ),
        (
            "mtl_ofi_tag_mode",
            "auto",
            "Layout of the 64-bit OFI tag: auto (ofi_tag_full if the provider has remote CQ \
             data and FI_DIRECTED_RECV, else ofi_tag_1), ofi_tag_1 (12-bit communicator id, \
             18-bit rank, 32-bit tag), ofi_tag_2 (24 / 18 / 20 bits) or ofi_tag_full \
             (28-bit communicator id, 32-bit tag, the rank in the CQ data)",
        ),
        (
            "mtl_ofi_progress_event_cnt",
            "100",
            "Completions read from the completion queue per call while draining it",
        ),
        (
            "mtl_ofi_enable_sep",
            "0",
            "Use a scalable endpoint (FI_SCALABLE_EP) with mtl_ofi_num_ctxts contexts; \
             the provider must support more than one transmit context per endpoint",
        ),
        (
            "mtl_ofi_thread_grouping",
            "0",
            "Choose the scalable endpoint's context by communicator id (requires \
             mtl_ofi_enable_sep=1); otherwise context 0 is used",
        ),
        (
            "mtl_ofi_num_ctxts",
            "1",
            "Number of scalable-endpoint contexts (with mtl_ofi_enable_sep=1)",
        ),
        (
            "mtl_ofi_wait_fd",
            "auto",
            "1: open the completion queues with a file-descriptor wait object (FI_WAIT_FD) \
             where the provider has one, so that an idle wait sleeps until a completion \
             comes (fi_trywait, then poll) instead of by the clock; 0: no wait object \
             (every completion is cheaper); auto: 1 when the node has more ranks than cores \
             (or mpi_yield_when_idle=yes), else 0",
        ),
        (
            "mtl_ofi_library",
            DEFAULT_LIBRARY,
            "The libfabric shared library opened at run time (a file name the dynamic \
             loader searches for, or a path)",
        ),
    ]
}

fn parse_bool(name: &str, v: &str) -> Result<bool, OpenError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(OpenError::Param {
            name: name.to_owned(),
            value: v.to_owned(),
            why: "not a boolean (0/1, true/false, yes/no, on/off)".into(),
        }),
    }
}

fn parse_count(name: &str, v: &str) -> Result<usize, OpenError> {
    match v.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(OpenError::Param {
            name: name.to_owned(),
            value: v.to_owned(),
            why: "not a positive integer".into(),
        }),
    }
}

impl OfiParams {
    /// The parameters from `(name, value)` pairs over the defaults; names
    /// not starting with `mtl_ofi_` are ignored, unknown `mtl_ofi_` names
    /// and bad values are errors.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<OfiParams, OpenError> {
        let mut p = OfiParams::default();
        for (name, v) in pairs {
            match name {
                "mtl_ofi_provider_include" => p.provider_include = v.trim().to_owned(),
                "mtl_ofi_provider_exclude" => p.provider_exclude = v.trim().to_owned(),
                "mtl_ofi_tag_mode" => {
                    p.tag_mode = match v.trim() {
                        "auto" => TagModeParam::Auto,
                        s => TagModeParam::Forced(TagMode::from_name(s).ok_or_else(|| {
                            OpenError::Param {
                                name: name.to_owned(),
                                value: v.to_owned(),
                                why: "not one of auto, ofi_tag_1, ofi_tag_2, ofi_tag_full".into(),
                            }
                        })?),
                    }
                }
                "mtl_ofi_progress_event_cnt" => p.progress_event_cnt = parse_count(name, v)?,
                "mtl_ofi_enable_sep" => p.enable_sep = parse_bool(name, v)?,
                "mtl_ofi_thread_grouping" => p.thread_grouping = parse_bool(name, v)?,
                "mtl_ofi_num_ctxts" => p.num_ctxts = parse_count(name, v)?,
                "mtl_ofi_library" => p.library = v.trim().to_owned(),
                // `auto` is settled by the runtime, which knows the node;
                // on its own the MTL takes it as 1.
                "mtl_ofi_wait_fd" if v.trim() == "auto" => p.wait_fd = true,
                "mtl_ofi_wait_fd" => p.wait_fd = parse_bool(name, v)?,
                n if n.starts_with("mtl_ofi_") => {
                    return Err(OpenError::Param {
                        name: n.to_owned(),
                        value: v.to_owned(),
                        why: "no such parameter of the ofi MTL".into(),
                    })
                }
                _ => {}
            }
        }
        Ok(p)
    }

    /// Checks the combinations that are errors whatever the provider.
    pub(crate) fn validate(&self) -> Result<(), OpenError> {
        if !self.provider_include.is_empty() && self.provider_exclude != DEFAULT_EXCLUDE {
            return Err(OpenError::Param {
                name: "mtl_ofi_provider_include".into(),
                value: self.provider_include.clone(),
                why: format!(
                    "only one of mtl_ofi_provider_include and mtl_ofi_provider_exclude may be \
                     set (exclude is \"{}\")",
                    self.provider_exclude
                ),
            });
        }
        if self.thread_grouping && !self.enable_sep {
            return Err(OpenError::Param {
                name: "mtl_ofi_thread_grouping".into(),
                value: "1".into(),
                why: "requires mtl_ofi_enable_sep=1".into(),
            });
        }
        if self.progress_event_cnt == 0 || self.num_ctxts == 0 {
            return Err(OpenError::Param {
                name: "mtl_ofi_progress_event_cnt / mtl_ofi_num_ctxts".into(),
                value: "0".into(),
                why: "must be at least 1".into(),
            });
        }
        Ok(())
    }

    /// Whether the provider named `prov` passes the include / exclude
    /// lists.
    pub(crate) fn admits(&self, prov: &str) -> bool {
        if !self.provider_include.is_empty() {
            in_list(&self.provider_include, prov)
        } else {
            !in_list(&self.provider_exclude, prov)
        }
    }
}

/// Whether comma list `list` names provider `prov`: an entry matches the
/// whole name or one of its `;`-separated parts, ignoring case (Open MPI's
/// rule, so that `tcp` names the layered `tcp;ofi_rxm` too).
pub fn in_list(list: &str, prov: &str) -> bool {
    list.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|e| e.eq_ignore_ascii_case(prov) || prov.split(';').any(|p| p.eq_ignore_ascii_case(e)))
}

/// What decides the tag mode.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TagCaps {
    /// `domain_attr->cq_data_size`.
    pub cq_data_size: usize,
    /// `FI_DIRECTED_RECV` in the provider's caps.
    pub directed_recv: bool,
}

/// The tag mode for a provider with `caps` (`auto` resolved as Open MPI
/// does; a forced `ofi_tag_full` that the provider cannot carry is an
/// error).
pub(crate) fn resolve_tag_mode(
    want: TagModeParam,
    caps: TagCaps,
    prov: &str,
) -> Result<TagMode, OpenError> {
    let full_ok = caps.cq_data_size >= 4 && caps.directed_recv;
    match want {
        TagModeParam::Auto if full_ok => Ok(TagMode::Full),
        TagModeParam::Auto => Ok(TagMode::Tag1),
        TagModeParam::Forced(TagMode::Full) if !full_ok => Err(OpenError::Unsupported(format!(
            "mtl_ofi_tag_mode=ofi_tag_full needs FI_REMOTE_CQ_DATA (at least 4 bytes of CQ \
             data) and FI_DIRECTED_RECV, and provider {prov} has {} bytes of CQ data{}",
            caps.cq_data_size,
            if caps.directed_recv {
                ""
            } else {
                " and no FI_DIRECTED_RECV"
            }
        ))),
        TagModeParam::Forced(m) => Ok(m),
    }
}

/// Why the `ofi` MTL did not open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// libfabric is not installed (the library did not load): the PML
    /// falls back to ob1.
    NotAvailable {
        /// The library file tried.
        library: String,
        /// The loader's words.
        why: String,
    },
    /// The installed libfabric is older than this binding supports.
    TooOld {
        /// Its version (`major.minor`).
        version: String,
    },
    /// No provider passes the include / exclude lists.
    NoProvider {
        /// The list that decided (`mtl_ofi_provider_include=...` or
        /// `mtl_ofi_provider_exclude=...`).
        list: String,
        /// The providers libfabric offered for tagged RDM endpoints.
        found: Vec<String>,
    },
    /// A parameter has a bad value.
    Param {
        /// The parameter.
        name: String,
        /// Its value.
        value: String,
        /// What is wrong.
        why: String,
    },
    /// The chosen provider cannot do what the parameters ask.
    Unsupported(String),
    /// A libfabric call failed.
    Call {
        /// The call.
        call: String,
        /// libfabric's message.
        why: String,
    },
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::NotAvailable { library, why } => {
                write!(f, "libfabric is not available ({library}: {why})")
            }
            OpenError::TooOld { version } => write!(
                f,
                "libfabric {version} is older than the 1.5 this MTL supports"
            ),
            OpenError::NoProvider { list, found } => {
                let found = if found.is_empty() {
                    "none".to_owned()
                } else {
                    found.join(", ")
                };
                write!(
                    f,
                    "no OFI provider with FI_TAGGED and FI_EP_RDM passes {list} (found: {found})"
                )
            }
            OpenError::Param { name, value, why } => write!(f, "{name}={value}: {why}"),
            OpenError::Unsupported(s) => f.write_str(s),
            OpenError::Call { call, why } => write!(f, "{call} failed: {why}"),
        }
    }
}

impl std::error::Error for OpenError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_match_whole_names_and_parts() {
        assert!(in_list("tcp", "tcp;ofi_rxm"));
        assert!(in_list("shm, sockets ,tcp,udp", "udp;ofi_rxd"));
        assert!(in_list("ofi_rxm", "tcp;ofi_rxm"));
        assert!(in_list("TCP;OFI_RXM", "tcp;ofi_rxm"));
        assert!(!in_list("tc", "tcp;ofi_rxm"));
        assert!(!in_list("", "tcp"));
        assert!(!in_list("verbs", "tcp;ofi_rxm"));
        let p = OfiParams::default();
        assert!(!p.admits("tcp;ofi_rxm") && !p.admits("shm") && p.admits("psm3"));
        let p = OfiParams::from_pairs([("mtl_ofi_provider_include", "shm")]).unwrap();
        assert!(p.admits("shm") && !p.admits("tcp;ofi_rxm"));
    }

    #[test]
    fn pairs_parse_and_bad_values_name_the_parameter() {
        let p = OfiParams::from_pairs([
            ("mtl_ofi_tag_mode", "ofi_tag_2"),
            ("mtl_ofi_progress_event_cnt", "7"),
            ("mtl_ofi_enable_sep", "1"),
            ("mtl_ofi_num_ctxts", "4"),
            ("btl", "self,sm"),
        ])
        .unwrap();
        assert_eq!(p.tag_mode, TagModeParam::Forced(TagMode::Tag2));
        assert_eq!(
            (p.progress_event_cnt, p.enable_sep, p.num_ctxts),
            (7, true, 4)
        );
        let e = OfiParams::from_pairs([("mtl_ofi_tag_mode", "ofi_tag_3")]).unwrap_err();
        assert!(
            e.to_string().starts_with("mtl_ofi_tag_mode=ofi_tag_3"),
            "{e}"
        );
        let e = OfiParams::from_pairs([("mtl_ofi_nonsense", "1")]).unwrap_err();
        assert!(e.to_string().contains("no such parameter"), "{e}");
        let e = OfiParams::from_pairs([("mtl_ofi_num_ctxts", "0")]).unwrap_err();
        assert!(e.to_string().contains("positive"), "{e}");
        let both = OfiParams::from_pairs([
            ("mtl_ofi_provider_include", "tcp"),
            ("mtl_ofi_provider_exclude", "shm"),
        ])
        .unwrap();
        assert!(both
            .validate()
            .unwrap_err()
            .to_string()
            .contains("only one"));
        for (name, default, help) in params() {
            assert!(name.starts_with("mtl_ofi_") && !help.is_empty());
            OfiParams::from_pairs([(name, default)]).unwrap_or_else(|e| {
                if !default.is_empty() {
                    panic!("{name}: default {default:?}: {e}")
                }
                OfiParams::default()
            });
        }
    }

    #[test]
    fn auto_and_forced_tag_modes() {
        let full = TagCaps {
            cq_data_size: 8,
            directed_recv: true,
        };
        let none = TagCaps {
            cq_data_size: 0,
            directed_recv: true,
        };
        let undirected = TagCaps {
            cq_data_size: 8,
            directed_recv: false,
        };
        assert_eq!(
            resolve_tag_mode(TagModeParam::Auto, full, "x"),
            Ok(TagMode::Full)
        );
        assert_eq!(
            resolve_tag_mode(TagModeParam::Auto, none, "x"),
            Ok(TagMode::Tag1)
        );
        assert_eq!(
            resolve_tag_mode(TagModeParam::Auto, undirected, "x"),
            Ok(TagMode::Tag1)
        );
        let forced = TagModeParam::Forced(TagMode::Full);
        let e = resolve_tag_mode(forced, none, "prov")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ofi_tag_full") && e.contains("prov") && e.contains("0 bytes"),
            "{e}"
        );
        let e = resolve_tag_mode(forced, undirected, "prov")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no FI_DIRECTED_RECV"), "{e}");
        assert_eq!(
            resolve_tag_mode(TagModeParam::Forced(TagMode::Tag2), none, "x"),
            Ok(TagMode::Tag2)
        );
    }
}
