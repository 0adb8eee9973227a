//! Redaction of the secrets a DSN carries from every message that could repeat them
//! (docs/semantics.md#sessions). Each backend parses its own DSNs; the secrets and their
//! redaction are the same for every URL-shaped DSN.

/// Maximum length of a redacted message (docs/semantics.md#sessions: cut to 500 characters).
pub const MAX_MESSAGE_CHARS: usize = 500;

/// The secrets contained in a URL-shaped DSN (`scheme://user:password@host/...`): the raw and
/// percent-decoded password, `user:password`, and the DSN itself, longest first so that
/// `user:password` is replaced before `password`.
pub fn secrets_of(dsn: &str) -> Vec<String> {
    let mut out = vec![dsn.to_owned()];
    if let Some((_, rest)) = dsn.split_once("://")
        && let Some((userinfo, _)) = rest.rsplit_once('@')
    {
        out.push(userinfo.to_owned());
        if let Some((_, pass)) = userinfo.split_once(':')
            && !pass.is_empty()
        {
            out.push(pass.to_owned());
            let decoded = percent_decode(pass);
            if decoded != pass {
                out.push(decoded);
            }
        }
    }
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.retain(|s| !s.is_empty());
    out
}

/// Decodes `%XX` escapes (invalid escapes are kept as they are; invalid UTF-8 is replaced).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex_val(bytes[i + 1]), hex_val(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_val(b: u8) -> Option<u8> {
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Replaces every secret with `<redacted>` and cuts the message to [`MAX_MESSAGE_CHARS`].
pub fn redact(message: &str, secrets: &[String]) -> String {
    let mut m = message.to_owned();
    for s in secrets {
        if !s.is_empty() {
            m = m.replace(s.as_str(), "<redacted>");
        }
    }
    if m.chars().count() > MAX_MESSAGE_CHARS {
        m = m.chars().take(MAX_MESSAGE_CHARS).collect();
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_and_password_are_redacted_longest_first() {
        let secrets = secrets_of("mysql://user:hunter2@h/db");
        assert_eq!(
            redact("Access denied for user:hunter2 hunter2", &secrets),
            "Access denied for <redacted> <redacted>"
        );
    }

    #[test]
    fn percent_encoded_passwords_are_redacted_raw_and_decoded() {
        let secrets = secrets_of("postgresql://u:p%40ss@h/db");
        assert_eq!(
            redact("x p@ss y p%40ss", &secrets),
            "x <redacted> y <redacted>"
        );
        assert_eq!(percent_decode("s3cr%21t"), "s3cr!t");
        assert_eq!(percent_decode("bad%zz%4"), "bad%zz%4");
    }

    #[test]
    fn the_whole_dsn_is_a_secret_and_messages_are_cut() {
        let dsn = "mysql://nopass@h/db";
        assert_eq!(
            redact(&format!("bad {dsn}"), &secrets_of(dsn)),
            "bad <redacted>"
        );
        let long = "x".repeat(MAX_MESSAGE_CHARS + 10);
        assert_eq!(redact(&long, &[]).chars().count(), MAX_MESSAGE_CHARS);
    }
}
