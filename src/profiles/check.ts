// What `check` refuses on a profile route: settings that would break the protocol's contract, each
// at the line that sets it (the route's block, or `defaults` when inherited from there).
import type { IdempotencyBlock } from '../config/schema';
import type { IssuePath, PathIssue } from '../config/path-issue';
import { settingOf } from '../config/setting';
import { parseDurationMs } from '../config/units';
import type { Profile } from './profile';

export function checkProfileRoute(
  profile: Profile,
  block: IdempotencyBlock,
  defaults: IdempotencyBlock | undefined,
  at: IssuePath,
  builtInTtl: string,
): PathIssue[] {
  const own = [...at, 'idempotency'];
  const issues: PathIssue[] = [];
  const named = `an ${profile.name} route (${profile.protocol})`;
  /** Where a setting is, and its value: the route's own, else the defaults'. */
  const setting = <T>(read: (b: IdempotencyBlock) => T | undefined, field: IssuePath) =>
    settingOf(block, defaults, own, read, field);
  const refuse = (path: IssuePath, message: string) => issues.push({ path, message });

  if (block.mcp !== undefined || block.a2a !== undefined)
    refuse(
      [...own, 'profile'],
      `a profile is the contract of a protocol's REST binding; remove profile, or ${block.mcp ? 'mcp' : 'a2a'}`,
    );
  const ttl = setting((b) => b.ttl, ['ttl']);
  if (parseDurationMs(ttl?.value ?? builtInTtl) < profile.minRetentionMs)
    refuse(
      ttl?.path ?? [...own, 'profile'],
      `expected a ttl of at least 24h on ${named}: the protocol requires keys and their answers to be kept that long`,
    );
  const derive = setting((b) => b.key?.derive, ['key', 'derive']);
  if (derive !== undefined)
    refuse(derive.path, `${named} keys requests by the key the client sends; remove key.derive`);
  const required = setting((b) => b.key?.required, ['key', 'required']);
  if (profile.keyRequired && required?.value === false)
    refuse(required.path, `${named} requires a key on every request; remove key.required: false`);
  const body = setting((b) => b.key?.body, ['key', 'body']);
  if (profile.headerKeyOnly && body !== undefined)
    refuse(body.path, `${named} reads the key from its header only; remove key.body`);
  const header = setting((b) => b.key?.header, ['key', 'header']);
  if (header !== undefined && header.value.toLowerCase() !== 'idempotency-key')
    refuse(header.path, `${named} sends its key in Idempotency-Key; remove key.header`);
  const maxLength = setting((b) => b.key?.maxLength, ['key', 'maxLength']);
  if (
    profile.maxKeyLength !== null &&
    maxLength !== undefined &&
    maxLength.value > profile.maxKeyLength
  )
    refuse(
      maxLength.path,
      `expected at most ${profile.maxKeyLength} on ${named}: its keys are at most ${profile.maxKeyLength} characters`,
    );
  const replayed = setting((b) => b.replayedHeader, ['replayedHeader']);
  const marker = profile.replayedHeader;
  if (
    marker !== null &&
    replayed !== undefined &&
    replayed.value.toLowerCase() !== marker.toLowerCase()
  )
    refuse(replayed.path, `${named} marks a replay with ${marker}: true; remove replayedHeader`);
  const fingerprint = setting((b) => b.fingerprint, ['fingerprint']);
  if (fingerprint !== undefined)
    refuse(fingerprint.path, `${named} fixes what a repeat must match; remove fingerprint`);
  const unknown = setting((b) => b.unknownOutcome, ['unknownOutcome']);
  if (
    profile.unknownOutcome !== null &&
    unknown !== undefined &&
    unknown.value !== profile.unknownOutcome
  )
    refuse(
      unknown.path,
      `${named} never stores a 5xx, so a request whose outcome is unknown must run again: expected unknownOutcome: ${profile.unknownOutcome}`,
    );
  const concurrent = setting((b) => b.onConcurrent, ['onConcurrent']);
  if (
    profile.onConcurrent !== null &&
    concurrent !== undefined &&
    concurrent.value !== profile.onConcurrent
  )
    refuse(
      concurrent.path,
      `${named} answers a repeat of a request still in flight with 409 and Retry-After: expected onConcurrent: ${profile.onConcurrent}`,
    );
  const enforce = setting((b) => b.enforce, ['enforce']);
  if (enforce?.value === false)
    refuse(
      enforce.path,
      `${named} answers repeats and fails closed when the store is down; shadow mode (enforce: false) does neither`,
    );
  const tenant = setting((b) => b.tenant, ['tenant']);
  if (tenant === undefined || tenant.value.length === 0)
    refuse(
      tenant?.path ?? [...own, 'profile'],
      `${named} scopes keys by the caller: set tenant, e.g. [jwt:sub] with auth.jwt`,
    );
  return issues;
}
