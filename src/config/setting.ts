// The one way to ask where a protected route's setting comes from: the route's own idempotency
// block, else the `defaults:` block it inherits from (the built-in default applies when neither
// sets it). A check that refuses a setting names the block that set it.
import type { IssuePath } from './path-issue';
import type { IdempotencyBlock } from './schema';

/** A setting's value and the YAML path of the block that set it. */
export interface Setting<T> {
  readonly value: T;
  readonly path: IssuePath;
}

/**
 * `field` (read from a block by `read`) as the route at `own` (its `idempotency` path) has it: its
 * own, else inherited from `defaults`; undefined when neither sets it.
 */
export function settingOf<T>(
  block: IdempotencyBlock,
  defaults: IdempotencyBlock | undefined,
  own: IssuePath,
  read: (block: IdempotencyBlock) => T | undefined,
  field: IssuePath,
): Setting<T> | undefined {
  const mine = read(block);
  if (mine !== undefined) return { value: mine, path: [...own, ...field] };
  const inherited = defaults === undefined ? undefined : read(defaults);
  if (inherited !== undefined) return { value: inherited, path: ['defaults', ...field] };
  return undefined;
}
