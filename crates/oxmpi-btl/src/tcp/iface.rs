//! Which network interfaces the TCP BTL listens on.
//!
//! Interfaces are enumerated with `getifaddrs` (through `nix`): every
//! interface that is up and has an IPv4 address, one entry per (interface,
//! address), in the kernel's order.
//!
//! Selection policy ([`IfFilter::select`]), like Open MPI's:
//! * `btl_tcp_if_include` set: exactly the interfaces it names (by name, or
//!   by an address inside one of its CIDR networks), loopback included if
//!   named;
//! * otherwise every interface not named by `btl_tcp_if_exclude`, except
//!   loopback, which is used only when no other interface remains (so a
//!   single-node job on a machine without network still works);
//! * both set is an error naming both parameters;
//! * an interface with several addresses is used once, with its first
//!   selected address (a CIDR include can pick which one).
//!
//! IPv6 is not used.

use std::net::Ipv4Addr;

use crate::btl::BtlError;

/// One IPv4 address of an interface that is up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// The interface name (`eth0`, `lo`).
    pub name: String,
    /// The address.
    pub addr: Ipv4Addr,
    /// Prefix length of its network.
    pub prefix_len: u8,
    /// Whether it is a loopback interface.
    pub loopback: bool,
}

/// An entry of `btl_tcp_if_include` / `btl_tcp_if_exclude`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IfSpec {
    /// An interface name, matched exactly.
    Name(String),
    /// A network `a.b.c.d/n` (a bare address means `/32`).
    Cidr(Ipv4Addr, u8),
}

impl IfSpec {
    /// Parses `eth0`, `10.1.0.0/16` or `10.1.2.3`.
    pub fn parse(s: &str) -> Result<IfSpec, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty interface specification".into());
        }
        let looks_numeric = s
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '/');
        if let Some((a, p)) = s.split_once('/') {
            let addr: Ipv4Addr = a
                .parse()
                .map_err(|_| format!("\"{s}\": \"{a}\" is not an IPv4 address"))?;
            let prefix: u8 = p
                .parse()
                .ok()
                .filter(|&p| p <= 32)
                .ok_or_else(|| format!("\"{s}\": prefix length \"{p}\" is not in 0..=32"))?;
            return Ok(IfSpec::Cidr(addr, prefix));
        }
        if looks_numeric {
            let addr: Ipv4Addr = s
                .parse()
                .map_err(|_| format!("\"{s}\" is neither an interface name nor an IPv4 address"))?;
            return Ok(IfSpec::Cidr(addr, 32));
        }
        if s.len() > 15 || s.chars().any(|c| c.is_whitespace() || c == '/' || c == ',') {
            return Err(format!("\"{s}\" is not a valid interface name"));
        }
        Ok(IfSpec::Name(s.to_owned()))
    }

    /// Whether this specification names `iface`.
    pub fn matches(&self, iface: &Interface) -> bool {
        match self {
            IfSpec::Name(n) => *n == iface.name,
            IfSpec::Cidr(net, p) => {
                super::wire::network(iface.addr, *p) == super::wire::network(*net, *p)
            }
        }
    }
}

/// The parsed `btl_tcp_if_include` / `btl_tcp_if_exclude` pair.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IfFilter {
    /// Interfaces to use (if non-empty, only these).
    pub include: Vec<IfSpec>,
    /// Interfaces not to use.
    pub exclude: Vec<IfSpec>,
}

impl IfFilter {
    /// Parses both lists; setting both is an error naming both parameters.
    pub fn new<S: AsRef<str>>(include: &[S], exclude: &[S]) -> Result<IfFilter, BtlError> {
        if !include.is_empty() && !exclude.is_empty() {
            return Err(BtlError::Invalid(
                "btl_tcp_if_include and btl_tcp_if_exclude are mutually exclusive: set only one"
                    .into(),
            ));
        }
        let parse = |param: &str, list: &[S]| {
            list.iter()
                .map(|s| {
                    IfSpec::parse(s.as_ref())
                        .map_err(|e| BtlError::Invalid(format!("{param}: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(IfFilter {
            include: parse("btl_tcp_if_include", include)?,
            exclude: parse("btl_tcp_if_exclude", exclude)?,
        })
    }

    /// The interfaces of `all` to use (see the module doc for the policy).
    pub fn select(&self, all: &[Interface]) -> Vec<Interface> {
        let mut chosen: Vec<Interface> = Vec::new();
        let push = |i: &Interface, chosen: &mut Vec<Interface>| {
            if !chosen.iter().any(|c| c.name == i.name) {
                chosen.push(i.clone());
            }
        };
        if !self.include.is_empty() {
            for i in all {
                if self.include.iter().any(|s| s.matches(i)) {
                    push(i, &mut chosen);
                }
            }
            return chosen;
        }
        let allowed = |i: &&Interface| !self.exclude.iter().any(|s| s.matches(i));
        for i in all.iter().filter(allowed).filter(|i| !i.loopback) {
            push(i, &mut chosen);
        }
        if chosen.is_empty() {
            for i in all.iter().filter(allowed).filter(|i| i.loopback) {
                push(i, &mut chosen);
            }
        }
        chosen
    }
}

/// Every interface that is up with an IPv4 address, in the kernel's order.
pub fn system_interfaces() -> Result<Vec<Interface>, BtlError> {
    use nix::net::if_::InterfaceFlags;
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| {
        let hint = oxmpi_runtime::limits::errno_fd_hint(Some(e as i32));
        BtlError::Io(format!("getifaddrs: {e}{hint}"))
    })?;
    let mut out = Vec::new();
    for a in addrs {
        if !a.flags.contains(InterfaceFlags::IFF_UP) {
            continue;
        }
        let Some(addr) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) else {
            continue;
        };
        let prefix_len = a
            .netmask
            .as_ref()
            .and_then(|m| m.as_sockaddr_in())
            .map_or(32, |m| u32::from(m.ip()).leading_ones() as u8);
        out.push(Interface {
            name: a.interface_name.clone(),
            addr: addr.ip(),
            prefix_len,
            loopback: a.flags.contains(InterfaceFlags::IFF_LOOPBACK),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, a: [u8; 4], p: u8) -> Interface {
        Interface {
            name: name.into(),
            addr: Ipv4Addr::from(a),
            prefix_len: p,
            loopback: a[0] == 127,
        }
    }

    #[test]
    fn system_has_loopback() {
        let all = system_interfaces().unwrap();
        assert!(all.iter().any(|i| i.loopback), "{all:?}");
    }

    #[test]
    fn default_policy_prefers_real_interfaces() {
        let all = [
            iface("lo", [127, 0, 0, 1], 8),
            iface("eth0", [10, 0, 0, 5], 24),
        ];
        let f = IfFilter::default();
        assert_eq!(f.select(&all), vec![all[1].clone()]);
        assert_eq!(f.select(&all[..1]), vec![all[0].clone()]);
    }
}
