// The classes whose instances live for one request or less, on the paths every request takes: the
// heap's bound holds them through its collections (heap-bound.ts) so that V8 keeps their instances'
// shapes, and with them the code compiled for those shapes.
//
// Why it matters: V8 reaches the shape of a class's instances ("map") only weakly, through the
// class's transitions, and throws away every optimized function that checks for a shape it clears.
// The bound collects from a timer, between two tasks, when no request is half done: no instance of
// these classes exists, and each of its collections threw away 25–45 functions under new keys,
// which V8 then compiled again (test/bench/README.md). V8 spares a dying shape whose class and
// prototype are already marked when it looks, just after the roots; values on the stack are roots.
// Listed: what the bench's deoptimization traces named, from the packages every request goes
// through. A class a newer package no longer has (or no longer exports) is left out, which costs
// only the recompiling; the unit test names each one, so an upgrade that moves one fails there.
import { createHook } from 'node:async_hooks';
import { EventEmitter } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { Duplex, Readable, Writable } from 'node:stream';
import { ChunkedBody } from './http/body';
import { FramedHash } from './idempotency/fingerprint';
import { ReceiverHandler } from './upstream/protected';

type Constructor = abstract new (...args: never[]) => unknown;

/** The short-lived classes, each followed by its prototype: what a collection holds on its stack. */
export function shortLivedClasses(): readonly object[] {
  const classes: (Constructor | undefined)[] = [
    FramedHash,
    ChunkedBody,
    ReceiverHandler,
    EventEmitter,
    http.IncomingMessage,
    http.ServerResponse,
    http.OutgoingMessage,
    net.Socket,
    Readable,
    Writable,
    Duplex,
    streamState(Readable, 'ReadableState'),
    streamState(Writable, 'WritableState'),
    tickClass(),
    timerClass(),
    immediateClass(),
    ...pgClasses(),
    undiciRequest(),
  ];
  return classes.flatMap((type) => (type === undefined ? [] : [type, type.prototype as object]));
}

/** Node hangs a stream's state class on the stream class (not in its types). */
function streamState(stream: object, name: string): Constructor | undefined {
  return asClass((stream as Record<string, unknown>)[name]);
}

/**
 * What process.nextTick queues (Node 26's TickObject, not exported; a plain object before, whose
 * class is Object): an async hook is told of each one as it is made, so one is enabled for one
 * tick's making, then disabled.
 */
function tickClass(): Constructor | undefined {
  let made: unknown;
  const hook = createHook({
    init(_id, type, _trigger, resource: object) {
      if (type === 'TickObject') made = resource.constructor;
    },
  }).enable();
  try {
    process.nextTick(() => undefined);
  } finally {
    hook.disable();
  }
  return asClass(made);
}

/** Timeout is not exported: an instance made and cleared at once gives it. */
function timerClass(): Constructor | undefined {
  const timer = setTimeout(() => undefined, 0);
  clearTimeout(timer);
  return asClass(timer.constructor);
}

function immediateClass(): Constructor | undefined {
  const immediate = setImmediate(() => undefined);
  clearImmediate(immediate);
  return asClass(immediate.constructor);
}

/** pg's query and result, and the protocol's messages a result is parsed from. */
function pgClasses(): (Constructor | undefined)[] {
  const pg = loadModule('pg');
  // pg-protocol is pg's dependency, not ours: found from where pg is.
  const messages = loadModule('pg-protocol/dist/messages', 'pg');
  return [asClass(pg?.Query), asClass(pg?.Result), ...Object.values(messages ?? {}).map(asClass)];
}

/** undici's request, one per call upstream (internal: loaded by path). */
function undiciRequest(): Constructor | undefined {
  return asClass(loadModule('undici/lib/core/request'));
}

/** A module by its id (from where `besides` is, if given); undefined where it is not found. */
function loadModule(id: string, besides?: string): Record<string, unknown> | undefined {
  try {
    const paths = besides === undefined ? undefined : [path.dirname(require.resolve(besides))];
    // Loaded by id at run time: two of these are internal paths, with no types to import.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    return require(require.resolve(id, paths && { paths })) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

function asClass(value: unknown): Constructor | undefined {
  return typeof value === 'function' && typeof value.prototype === 'object'
    ? (value as Constructor)
    : undefined;
}
