// The classes the heap's bound holds through its collections: each one found (an upgrade of Node,
// pg or undici that moves one fails here, not silently in the bench), each with its prototype.
import { shortLivedClasses } from '../../src/short-lived-classes';

const held = shortLivedClasses();
const classes = held.filter((_, at) => at % 2 === 0) as (abstract new () => unknown)[];

test('each class is followed by its own prototype', () => {
  expect(held.length % 2).toBe(0);
  classes.forEach((type, at) => {
    expect(typeof type).toBe('function');
    expect(held[2 * at + 1]).toBe(type.prototype);
  });
});

test("the request path's classes are all found: ours, Node's, pg's and undici's", () => {
  const names = classes.map((type) => type.name);
  expect(names).toEqual(
    expect.arrayContaining([
      'FramedHash',
      'ChunkedBody',
      'ReceiverHandler',
      'IncomingMessage',
      'ServerResponse',
      'Socket',
      'ReadableState',
      'WritableState',
      'Timeout',
      'Immediate',
      'Query',
      'Result',
      'DataRowMessage',
      'RowDescriptionMessage',
      'CommandCompleteMessage',
      'ReadyForQueryMessage',
      'Request',
    ]),
  );
  // What process.nextTick queues: Node 26's TickObject, a plain object before it.
  expect(names).toContain(
    Number(process.versions.node.split('.')[0]) >= 26 ? 'TickObject' : 'Object',
  );
  expect(new Set(classes).size).toBe(classes.length);
});
