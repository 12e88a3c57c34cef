//! Bounds on the config text checked before any YAML parser sees it: its size and how
//! deep its flow collections (`[...]`, `{...}`) nest.
//!
//! Why before parsing: the YAML scanners we use (libyaml's port inside serde_norway,
//! and yaml-rust2 for positions) keep one "simple key" slot per open flow collection and
//! revisit them all on every token, so 400 KB of `[[[[...` kept `check` busy for minutes
//! before serde's recursion limit was ever reached. A linear pass over the text finds the
//! first bracket too deep, with its line and column, in milliseconds.
//!
//! The pass is a lexer for what matters here only: quoted scalars, comments and block
//! scalars (`|`, `>`) are skipped, so a bracket inside a string or a JSON `body: |` does
//! not count, and a bracket opens a collection only where a YAML node can start. It may
//! miscount odd but valid text (unbalanced brackets in multi-line plain scalars), and
//! only ever towards [`MAX_FLOW_DEPTH`], which no real probes.yaml comes near: the
//! deepest is a tensor's data, three or four levels.

/// Deepest flow nesting taken.
pub(super) const MAX_FLOW_DEPTH: usize = 64;

/// Line and column (from 1) of the first `[` or `{` nested deeper than
/// [`MAX_FLOW_DEPTH`], if any.
pub(super) fn too_deep(text: &str) -> Option<(usize, usize)> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    // While inside a block scalar: the indentation of the line that started it.
    let mut block_scalar: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        if let Some(parent) = block_scalar {
            if line.trim().is_empty() || indent > parent {
                continue;
            }
            block_scalar = None;
        }
        // The last significant character before this one on the line, and the one just
        // before (to tell `key: [` from `a[`).
        let mut last_token: Option<char> = None;
        let mut previous: Option<char> = None;
        let mut chars = line.chars().enumerate().peekable();
        while let Some((col, c)) = chars.next() {
            match quote {
                Some('\'') => {
                    if c == '\'' {
                        quote = None;
                    }
                    previous = Some(c);
                    continue;
                }
                Some(_) => {
                    if c == '\\' {
                        chars.next();
                    } else if c == '"' {
                        quote = None;
                    }
                    previous = Some(c);
                    continue;
                }
                None => {}
            }
            let after_space = previous.is_none_or(char::is_whitespace);
            // Where a node may start: at the start of a line, after `key: `, `- `, `? `,
            // or inside a flow collection after `[`, `{` or `,`.
            let node_start = match last_token {
                None => true,
                // In a flow, JSON-style `"a":[` has no space after the colon.
                Some(':') => after_space || depth > 0,
                Some('-' | '?') => after_space,
                Some('[' | '{' | ',') => depth > 0,
                _ => false,
            };
            match c {
                '#' if after_space => break,
                '\'' | '"' if node_start => quote = Some(c),
                // Inside a flow a plain scalar cannot hold a bracket: every one counts.
                '[' | '{' if node_start || depth > 0 => {
                    depth += 1;
                    if depth > MAX_FLOW_DEPTH {
                        return Some((n + 1, col + 1));
                    }
                }
                ']' | '}' if depth > 0 => depth -= 1,
                '|' | '>' if depth == 0 && node_start => {
                    // Only indentation and chomping indicators, then an optional comment.
                    let rest: String = chars.clone().map(|(_, c)| c).collect();
                    let rest = rest.split(" #").next().unwrap_or_default();
                    if rest
                        .trim()
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == '+' || c == '-')
                    {
                        block_scalar = Some(indent);
                        break;
                    }
                }
                _ => {}
            }
            if !c.is_whitespace() {
                last_token = Some(c);
            }
            previous = Some(c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_flows_are_found_where_they_pass_the_limit() {
        let deep = "[".repeat(400_000);
        assert_eq!(too_deep(&deep), Some((1, MAX_FLOW_DEPTH + 1)));
        let deep = format!("probes:\n  - x: {}", "{a: ".repeat(100));
        assert_eq!(too_deep(&deep), Some((2, 8 + 4 * MAX_FLOW_DEPTH)));
        let ok = format!("x: {}{}", "[".repeat(MAX_FLOW_DEPTH), "]".repeat(MAX_FLOW_DEPTH));
        assert_eq!(too_deep(&ok), None);
        // Balanced flows one after another never add up.
        let many = "- [[1, 2], {a: [3]}]\n".repeat(10_000);
        assert_eq!(too_deep(&many), None);
    }

    #[test]
    fn brackets_in_strings_comments_and_block_scalars_do_not_count() {
        let opens = "[".repeat(100);
        for text in [
            format!("a: '{opens}'"),
            format!("a: \"{opens}\\\"{opens}\""),
            format!("a: b # {opens}"),
            format!("matches: x{opens}"),
            format!("body: |\n  {opens}\n  more\nnext: 1"),
            format!("body: >-\n    {opens}\n"),
            format!("a: [\"{opens}\", '{opens}']"),
            format!("- it's {opens}"),
        ] {
            assert_eq!(too_deep(&text), None, "{text}");
        }
        // After a block scalar ends, counting resumes.
        let text = format!("body: |\n  x\nnext: {opens}");
        assert_eq!(too_deep(&text), Some((3, 7 + MAX_FLOW_DEPTH)));
    }
}
