// A JSON Web Key Set named by file in auth.jwt.jwks: read and checked when the config is compiled,
// so a missing or malformed file is an error at its line before anything listens (like tls-files.ts).
import fs from 'node:fs';
import type { IssuePath, PathIssue } from './path-issue';
import type { JwksDocument } from './types';

export function readJwksFile(
  file: string,
  at: IssuePath,
  issues: PathIssue[],
): JwksDocument | undefined {
  const fail = (message: string): undefined => {
    issues.push({ path: at, message });
    return undefined;
  };
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? String(error);
    return fail(
      `cannot read the JWKS file ${file} (${code}); give an https:// URL or a readable file`,
    );
  }
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch {
    return fail(`${file} is not JSON; expected a JSON Web Key Set like {"keys":[{...}]}`);
  }
  const keys = (document as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(keys) || keys.length === 0)
    return fail(`${file} has no "keys" list; expected a JSON Web Key Set like {"keys":[{...}]}`);
  const bad = keys.findIndex((key) => typeof key !== 'object' || key === null || !('kty' in key));
  if (bad >= 0) return fail(`${file}: keys[${bad}] is not a JSON Web Key (no "kty")`);
  if (keys.some((key) => 'd' in (key as object)))
    return fail(`${file} holds a private key ("d"); give the public keys only`);
  return { keys: keys as Record<string, unknown>[] };
}
