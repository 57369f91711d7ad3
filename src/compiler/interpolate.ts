// `${VAR}` and `${VAR:-default}` in config values. It runs on each string scalar AFTER the YAML is
// parsed (docs/README.md#small-rules), so whatever an environment variable holds — `: {`, newlines,
// `- x` — ends up inside one string and can never add keys, lists or anchors to the document.
// Substituted text is not scanned again, so an env value containing `${OTHER}` stays literal.
//
// Rules (shell-like, as in docker compose):
//   ${NAME}           the variable's value; an error when it is unset (empty is allowed)
//   ${NAME:-default}  the default when NAME is unset OR empty
//   $${               a literal "${"  (a lone "$" needs no escape)

export interface Interpolated {
  readonly value: string;
  /** True when at least one environment variable was substituted: such text may be a secret. */
  readonly fromEnv: boolean;
  /** The variables referenced, set or not, in order: messages about the value name them. */
  readonly variables: readonly string[];
  /** One plain-English message per bad or unset reference; empty when all went well. */
  readonly problems: readonly string[];
}

const REFERENCE = /^([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?$/s;
const SYNTAX_HINT = 'expected ${NAME} or ${NAME:-default} (write $${ for a literal "${")';

export function interpolate(text: string, env: NodeJS.ProcessEnv): Interpolated {
  // Fast path: most scalars have no "$" at all.
  if (!text.includes('${')) return { value: text, fromEnv: false, variables: [], problems: [] };
  let value = '';
  let fromEnv = false;
  const problems: string[] = [];
  const variables: string[] = [];
  let i = 0;
  while (i < text.length) {
    if (text.startsWith('$${', i)) {
      value += '${';
      i += 3;
      continue;
    }
    if (!text.startsWith('${', i)) {
      value += text[i];
      i += 1;
      continue;
    }
    const close = text.indexOf('}', i + 2);
    if (close === -1) {
      problems.push(`unclosed "\${" in ${JSON.stringify(text)}; ${SYNTAX_HINT}`);
      value += text.slice(i);
      break;
    }
    const inner = text.slice(i + 2, close);
    i = close + 1;
    const match = REFERENCE.exec(inner);
    if (!match || (match[2] ?? '').includes('${')) {
      problems.push(`invalid reference "\${${inner}}"; ${SYNTAX_HINT}`);
      continue;
    }
    const name = match[1]!;
    const fallback = match[2];
    if (!variables.includes(name)) variables.push(name);
    const set = env[name];
    if (set !== undefined && !(set === '' && fallback !== undefined)) {
      value += set;
      fromEnv = true;
    } else if (fallback !== undefined) {
      value += fallback;
    } else {
      problems.push(
        `environment variable ${name} is not set; set it, or give a default with \${${name}:-value}`,
      );
    }
  }
  return { value, fromEnv, variables, problems };
}
