// Deterministic idempotency keys for agent actions: the same action gives the same key on every
// attempt, restart and replay, and a different action gives a different key (UUIDv5, RFC 9562 §5.5).
import { isUuid, isWellFormedText, uuidV5 } from './uuid-v5.js';

/**
 * The namespace {@link stepKey} and {@link businessKey} use unless given another:
 * `57e1e5e4-793d-520e-84cb-fc284b261f6f`, itself `uuid5(NAMESPACE_URL, 'urn:idempotency-proxy:client')`.
 *
 * It is fixed forever: changing it would change every derived key, and a retry after an upgrade
 * would then run its action a second time. Pass your own namespace (any UUID; generate one once,
 * e.g. per application or per tenant) to keep your keys apart from other applications' keys that
 * share a proxy scope.
 */
export const DEFAULT_KEY_NAMESPACE = '57e1e5e4-793d-520e-84cb-fc284b261f6f';

/** Identifies one tool call of an agent run: what {@link stepKey} derives a key from. */
export interface StepKeyInput {
  /**
   * The run's id, generated **once** per run (a random UUID is fine) and kept when the run resumes.
   * Non-empty, and without `:` so the derived name is unambiguous.
   */
  readonly runId: string;
  /** The step number within the run: an integer ≥ 0, deterministic across a resume. */
  readonly step: number;
  /** The tool's name, e.g. `refund_order`. Non-empty. */
  readonly tool: string;
}

/**
 * The idempotency key of one agent step: UUIDv5 of `` `${runId}:${step}:${tool}` `` under `namespace`.
 *
 * Every attempt at the same step — a retry after a timeout, a restarted worker, an orchestrator
 * resuming from the top — derives the same key, so the proxy runs the call once and replays its
 * answer to the others. The derivation is the one in Python
 * `str(uuid.uuid5(namespace, f'{run_id}:{step}:{tool}'))`, so agents in either language agree.
 *
 * **When to use it:** for any write a step makes, when "once per step" is the right rule. It does
 * not catch a model that decides at step 7 to redo what it did at step 4: that is another step,
 * hence another key. For actions that must happen once per business object whatever the step (a
 * refund per order, a welcome email per user), use {@link businessKey}.
 *
 * Also save the tool arguments when the model emits them and resend those on retry: the proxy
 * answers 422 if the same key comes back with a different body.
 *
 * @example
 * ```ts
 * const key = stepKey({ runId: run.id, step: 4, tool: 'refund_order' });
 * ```
 * @param input - the run id, step number and tool name.
 * @param namespace - a UUID; defaults to {@link DEFAULT_KEY_NAMESPACE}.
 * @returns a lower-case hyphenated UUID, usable as an `Idempotency-Key`.
 * @throws TypeError when `runId` is empty or contains `:`, `step` is not an integer ≥ 0, `tool` is
 *   empty, a string holds a lone surrogate, or `namespace` is not a UUID.
 */
export function stepKey(input: StepKeyInput, namespace: string = DEFAULT_KEY_NAMESPACE): string {
  const { runId, step, tool } = input;
  requireText('runId', runId);
  if (runId.includes(':')) {
    throw new TypeError(
      `runId must not contain ":" (it separates the parts of the derived name), got ${show(runId)}`,
    );
  }
  if (typeof step !== 'number' || !Number.isSafeInteger(step) || step < 0) {
    throw new TypeError(`step must be an integer ≥ 0, got ${String(step)}`);
  }
  requireText('tool', tool);
  return uuidV5(requireNamespace(namespace), `${runId}:${step}:${tool}`);
}

/**
 * The parts {@link businessKey} accepts: one string used as it is, or a list of strings and safe
 * integers such as `['refund', orderId]`.
 */
export type BusinessKeyParts = string | readonly (string | number)[];

/**
 * The idempotency key of a business action that must happen at most once per business object,
 * whichever run or step attempts it: UUIDv5 under `namespace` of
 *
 * - a string: the string itself (`businessKey('refund:order-123')`);
 * - a list: its JSON encoding with integers written as strings, `["refund","order-123"]` for
 *   `['refund', 'order-123']`, so no separator inside a part can make two lists collide.
 *   In Python: `uuid.uuid5(ns, json.dumps([str(p) for p in parts], separators=(',', ':'),
 *   ensure_ascii=False))`.
 *
 * **When to use it:** when a repeat must be caught even if it comes from a *different* step or run —
 * a model that decides at step 7 to refund the order it refunded at step 4, two runs handling the
 * same ticket, a queue message delivered twice. Name the action and the object, and add the run id
 * when the rule is "once per run" rather than "once ever": `businessKey([runId, 'refund', orderId])`.
 * Keep the record's `ttl` on the proxy longer than the window in which a repeat must be caught.
 *
 * @example
 * ```ts
 * const key = businessKey(['refund', order.id]);
 * ```
 * @param parts - a non-empty string, or a non-empty list of non-empty strings and safe integers.
 * @param namespace - a UUID; defaults to {@link DEFAULT_KEY_NAMESPACE}.
 * @returns a lower-case hyphenated UUID, usable as an `Idempotency-Key`.
 * @throws TypeError when `parts` (or one of them) is empty, not a string or safe integer, holds a
 *   lone surrogate, or `namespace` is not a UUID.
 */
export function businessKey(
  parts: BusinessKeyParts,
  namespace: string = DEFAULT_KEY_NAMESPACE,
): string {
  if (typeof parts === 'string') {
    requireText('parts', parts);
    return uuidV5(requireNamespace(namespace), parts);
  }
  if (!Array.isArray(parts) || parts.length === 0) {
    throw new TypeError(
      'parts must be a non-empty string or a non-empty array of strings and integers',
    );
  }
  const texts = parts.map((part: unknown, index) => {
    if (typeof part === 'number') {
      if (!Number.isSafeInteger(part)) {
        throw new TypeError(
          `parts[${index}] must be a safe integer or a string, got ${String(part)}`,
        );
      }
      return String(part);
    }
    requireText(`parts[${index}]`, part);
    return part;
  });
  return uuidV5(requireNamespace(namespace), JSON.stringify(texts));
}

function requireText(name: string, value: unknown): asserts value is string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new TypeError(`${name} must be a non-empty string, got ${show(value)}`);
  }
  if (!isWellFormedText(value)) {
    throw new TypeError(`${name} must be well-formed Unicode: it holds a lone UTF-16 surrogate`);
  }
}

function requireNamespace(namespace: unknown): string {
  if (!isUuid(namespace)) {
    throw new TypeError(`namespace must be a UUID, got ${show(namespace)}`);
  }
  return namespace;
}

/** A value for an error message; JSON.stringify alone would throw on a bigint. */
function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (value === null || typeof value !== 'object') return String(value);
  return Array.isArray(value) ? 'an array' : 'an object';
}
