//! The shape of a captured SQL statement, for the backends' `every_statement_*` cost checks:
//! literals and placeholders replaced by `?` in each server's spelling ([`Dialect`]), repeats
//! collapsed, the ordering cut out. Each backend's test adds what only its SQL has.

/// How a server's SQL text spells what [`shape_literals`] replaces.
pub struct Dialect {
    /// The identifier quote (`` ` `` or `"`): a quoted identifier is kept as it is.
    pub ident_quote: char,
    /// Whether a backslash escapes the next character inside a string literal.
    pub backslash_escapes: bool,
    /// The characters besides digits that continue a number literal (`.`, or also the `-` and
    /// `:` of a bare date or time).
    pub number_chars: &'static str,
    /// Whether `$1`, `$2`, … are placeholders.
    pub dollar_params: bool,
}

/// `sql` with its string and number literals (and `$n` placeholders) replaced by `?`, quoted
/// identifiers kept, whitespace collapsed to single spaces and trimmed: the start of a
/// statement's shape, which each backend then collapses further.
pub fn shape_literals(sql: &str, dialect: &Dialect) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    let mut prev = ' ';
    while let Some(ch) = chars.next() {
        match ch {
            '\'' => {
                while let Some(c) = chars.next() {
                    match c {
                        '\\' if dialect.backslash_escapes => {
                            chars.next();
                        }
                        '\'' if chars.peek() == Some(&'\'') => {
                            chars.next();
                        }
                        '\'' => break,
                        _ => {}
                    }
                }
                out.push('?');
                prev = '?';
            }
            q if q == dialect.ident_quote => {
                out.push(q);
                for c in chars.by_ref() {
                    out.push(c);
                    if c == q {
                        break;
                    }
                }
                prev = q;
            }
            '$' if dialect.dollar_params && chars.peek().is_some_and(char::is_ascii_digit) => {
                while chars.peek().is_some_and(char::is_ascii_digit) {
                    chars.next();
                }
                out.push('?');
                prev = '?';
            }
            c if c.is_ascii_digit() && !(prev.is_ascii_alphanumeric() || prev == '_') => {
                while chars
                    .peek()
                    .is_some_and(|c| c.is_ascii_digit() || dialect.number_chars.contains(*c))
                {
                    chars.next();
                }
                out.push('?');
                prev = '?';
            }
            c if c.is_whitespace() => {
                if prev != ' ' {
                    out.push(' ');
                }
                prev = ' ';
            }
            c => {
                out.push(c);
                prev = c;
            }
        }
    }
    out.trim().to_owned()
}

/// `s` with each `from` of `pairs` replaced by its `to` until none is left (in order): repeated
/// list items, rows or arms collapsed to one.
pub fn collapse_repeats(mut s: String, pairs: &[(&str, &str)]) -> String {
    for (from, to) in pairs {
        while s.contains(from) {
            s = s.replace(from, to);
        }
    }
    s
}

/// The ordering of a statement whose `ORDER BY ` starts at byte `at` of `s`: what follows it up
/// to its `LIMIT`, `FOR` or closing parenthesis.
pub fn ordering(s: &str, at: usize) -> &str {
    let rest = &s[at + "ORDER BY ".len()..];
    let end = [" LIMIT", " FOR ", ")"]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
        .unwrap_or(rest.len());
    &rest[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_become_placeholders() {
        let mysql = Dialect {
            ident_quote: '`',
            backslash_escapes: true,
            number_chars: ".-:",
            dollar_params: false,
        };
        let shape = shape_literals(
            "SELECT `t1`.id FROM `t1`\n WHERE a = 'x\\'y''z' AND b IN (1, 2.5) AND c > 2026-01-01",
            &mysql,
        );
        assert_eq!(
            shape,
            "SELECT `t1`.id FROM `t1` WHERE a = ? AND b IN (?, ?) AND c > ?"
        );
        let postgres = Dialect {
            ident_quote: '"',
            backslash_escapes: false,
            number_chars: ".",
            dollar_params: true,
        };
        let shape = shape_literals(
            "UPDATE \"t1\" SET n = $1 WHERE id = ANY($2) AND s = 'a''b' LIMIT 10",
            &postgres,
        );
        assert_eq!(
            shape,
            "UPDATE \"t1\" SET n = ? WHERE id = ANY(?) AND s = ? LIMIT ?"
        );
        assert_eq!(
            collapse_repeats(
                shape_literals("IN (1, 2, 3)", &postgres).replace(", ", ","),
                &[("?,?", "?")]
            ),
            "IN (?)"
        );
        assert_eq!(
            ordering("SELECT x ORDER BY created_at DESC, id DESC LIMIT 5", 9),
            "created_at DESC, id DESC"
        );
    }
}
