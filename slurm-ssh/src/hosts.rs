//! The login-host list: parsing `SLURM_HOSTNAME` (`host`, `host:port`, `[v6addr]:port`, comma-separated).

use std::fmt;

use slurm_core::{Error, Result};

/// One login host as given by the user: a name or address and an optional port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    /// The host name, alias (looked up in `~/.ssh/config`) or address, without brackets.
    pub host: String,
    /// The port, when given explicitly.
    pub port: Option<u16>,
}

impl HostSpec {
    /// A host without an explicit port.
    pub fn new(host: impl Into<String>) -> Self {
        HostSpec {
            host: host.into(),
            port: None,
        }
    }

    /// A host with an explicit port.
    pub fn with_port(host: impl Into<String>, port: u16) -> Self {
        HostSpec {
            host: host.into(),
            port: Some(port),
        }
    }

    /// Parse one entry: `host`, `host:port`, `[v6addr]`, `[v6addr]:port`, or a bare
    /// IPv6 address (several colons, no port).
    pub fn parse(entry: &str) -> Result<Self> {
        let entry = entry.trim();
        let bad = |why: &str| {
            Error::config(
                "SLURM_HOSTNAME",
                format!(
                    "bad login host {entry:?}: {why}; write host, host:port or [v6addr]:port, comma-separated"
                ),
            )
        };
        if entry.is_empty() {
            return Err(bad("empty entry"));
        }
        if entry.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("contains whitespace"));
        }
        let parse_port = |p: &str| -> Result<u16> {
            match p.parse::<u16>() {
                Ok(0) | Err(_) => Err(bad("the port must be a number from 1 to 65535")),
                Ok(port) => Ok(port),
            }
        };
        if let Some(rest) = entry.strip_prefix('[') {
            let Some((addr, after)) = rest.split_once(']') else {
                return Err(bad("missing ']'"));
            };
            if addr.is_empty() {
                return Err(bad("empty address in brackets"));
            }
            let port = match after {
                "" => None,
                _ => match after.strip_prefix(':') {
                    Some(p) => Some(parse_port(p)?),
                    None => return Err(bad("expected ':port' after ']'")),
                },
            };
            return Ok(HostSpec {
                host: addr.to_string(),
                port,
            });
        }
        match entry.matches(':').count() {
            0 => Ok(HostSpec::new(entry)),
            1 => {
                let (host, port) = entry.split_once(':').expect("one colon");
                if host.is_empty() {
                    return Err(bad("empty host name"));
                }
                Ok(HostSpec::with_port(host, parse_port(port)?))
            }
            // A bare IPv6 address: a port needs brackets.
            _ => Ok(HostSpec::new(entry)),
        }
    }

    /// Parse a comma-separated list (the value of `SLURM_HOSTNAME`).
    pub fn parse_list(list: &str) -> Result<Vec<Self>> {
        if list.trim().is_empty() {
            return Err(Error::config(
                "SLURM_HOSTNAME",
                "no login host given; set it to host, host:port or a comma-separated list",
            ));
        }
        list.split(',').map(HostSpec::parse).collect()
    }
}

impl fmt::Display for HostSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.port, self.host.contains(':')) {
            (Some(port), true) => write!(f, "[{}]:{port}", self.host),
            (Some(port), false) => write!(f, "{}:{port}", self.host),
            (None, _) => f.write_str(&self.host),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let hosts =
            HostSpec::parse_list("login1, login2:2222,[::1]:22,[fe80::1],::1,10.0.0.1:8022")
                .unwrap();
        assert_eq!(
            hosts,
            vec![
                HostSpec::new("login1"),
                HostSpec::with_port("login2", 2222),
                HostSpec::with_port("::1", 22),
                HostSpec::new("fe80::1"),
                HostSpec::new("::1"),
                HostSpec::with_port("10.0.0.1", 8022),
            ]
        );
        assert_eq!(hosts[2].to_string(), "[::1]:22");
        assert_eq!(hosts[1].to_string(), "login2:2222");
    }

    #[test]
    fn rejects_bad_entries_naming_the_variable() {
        for bad in [
            "",
            "a,,b",
            "host:",
            "host:0",
            "host:99999",
            "[::1",
            "[::1]x",
            "[]:22",
            ":22",
            "a b",
        ] {
            let err = HostSpec::parse_list(bad).unwrap_err();
            assert!(err.to_string().contains("SLURM_HOSTNAME"), "{bad:?}: {err}");
        }
    }
}
