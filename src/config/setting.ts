// The one way to ask where a protected route's setting comes from: the route's own idempotency
// block, else the `defaults:` block it inherits from (the built-in default applies when neither
// sets it). A check that refuses a setting names the block that set it; the compiler asks only for
// the value (inheritedValue), and merges the nested blocks (key, fingerprint, streams) field by
// field (mergedBlock).
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

/** `field` (read by `read`) as the route has it, its own else the defaults', without where. */
export function inheritedValue<T>(
  block: IdempotencyBlock,
  defaults: IdempotencyBlock | undefined,
  read: (block: IdempotencyBlock) => T | undefined,
): T | undefined {
  const mine = read(block);
  return mine !== undefined || defaults === undefined ? mine : read(defaults);
}

/**
 * A nested block (read by `read`) merged field by field: the built-in fields, then those `defaults`
 * sets, then the route's own. A route that sets only `fingerprint.ignore` keeps the defaults' parts.
 */
export function mergedBlock<D extends object, B extends object>(
  builtIn: D,
  block: IdempotencyBlock,
  defaults: IdempotencyBlock | undefined,
  read: (block: IdempotencyBlock) => B | undefined,
): Merged<D, B> {
  return {
    ...builtIn,
    ...setFields(defaults === undefined ? undefined : read(defaults)),
    ...setFields(read(block)),
  } as Merged<D, B>;
}

/** A block's fields over the built-in ones: a field either may set is the built-in or a set one. */
export type Merged<D, B> = {
  [K in keyof D | keyof B]: K extends keyof B
    ? K extends keyof D
      ? D[K] | Exclude<B[K], undefined>
      : B[K]
    : K extends keyof D
      ? D[K]
      : never;
};

/** The fields of `value` that are set: an explicit undefined does not replace an inherited field. */
function setFields<T extends object>(value: T | undefined): Partial<T> {
  if (value === undefined) return {};
  return Object.fromEntries(
    Object.entries(value).filter(([, field]) => field !== undefined),
  ) as Partial<T>;
}
