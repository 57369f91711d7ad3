// The heap's bound (heapTarget) collects when the used heap passes the target, backs off when what
// is alive outgrows it, and never spends more than a twentieth of the time collecting.
import { HeapBound, type HeapSources, startHeapBound } from '../../src/heap-bound';
import { parseConfigText } from '../../src/compiler/load';
import { restartOnlyChanges } from '../../src/runtime';

const MB = 1024 * 1024;

/**
 * A heap that a test fills by hand: a collection leaves `live` bytes and takes `pauseMs` of the
 * clock, which the test moves too.
 */
class FakeHeap implements HeapSources {
  used = 0;
  live = 0;
  clock = 0;
  pauseMs = 10;
  collections = 0;
  usedBytes(): number {
    return this.used;
  }
  collect(): void {
    this.collections++;
    this.used = this.live;
    this.clock += this.pauseMs;
  }
  now(): number {
    return this.clock;
  }
}

/** A bound that has just collected once: 60 MB used, 20 MB left alive, `pauseMs` held. */
function collectedOnce(pauseMs: number): { heap: FakeHeap; bound: HeapBound } {
  const heap = new FakeHeap();
  const bound = new HeapBound(48 * MB, heap);
  heap.live = 20 * MB;
  heap.pauseMs = pauseMs;
  heap.used = 60 * MB;
  bound.check();
  return { heap, bound };
}

test('collects once the used heap passes the target, and reports what it freed', () => {
  const heap = new FakeHeap();
  const bound = new HeapBound(48 * MB, heap);
  heap.used = 48 * MB;
  expect(bound.check()).toBeUndefined();
  heap.used = 60 * MB;
  heap.live = 20 * MB;
  heap.pauseMs = 30;
  expect(bound.check()).toEqual({
    pauseMs: 30,
    usedBytesBefore: 60 * MB,
    usedBytesAfter: 20 * MB,
  });
  expect(heap.collections).toBe(1);
});

test('waits twenty times the last pause before collecting again', () => {
  const { heap, bound } = collectedOnce(30);
  heap.used = 90 * MB;
  heap.clock += 599;
  expect(bound.check()).toBeUndefined();
  heap.clock += 1;
  expect(bound.check()?.usedBytesBefore).toBe(90 * MB);
  expect(heap.collections).toBe(2);
});

test("waits twenty times the bound's own collection, as V8 reports it, not the whole call", () => {
  // Asked for while V8 marks, the call first finishes V8's cycle: 200 ms held, 10 ms of it ours.
  const { heap, bound } = collectedOnce(200);
  bound.forcedCollectionTook(150, 10);
  heap.used = 60 * MB;
  heap.clock += 199;
  expect(bound.check()).toBeUndefined();
  heap.clock += 1;
  expect(bound.check()?.usedBytesBefore).toBe(60 * MB);
  expect(heap.collections).toBe(2);
});

test('takes no report of a collection it did not ask for, and never waits longer for one', () => {
  const heap = new FakeHeap();
  const bound = new HeapBound(48 * MB, heap);
  bound.forcedCollectionTook(0, 1);
  heap.live = 20 * MB;
  heap.pauseMs = 30;
  heap.clock = 1000;
  heap.used = 60 * MB;
  bound.check();
  // Someone else's collection, before or after the bound's, says nothing of the bound's pause.
  bound.forcedCollectionTook(999, 1);
  bound.forcedCollectionTook(1031, 1);
  // A report longer than the whole call cannot be the bound's alone: the call's own time stands.
  bound.forcedCollectionTook(1010, 500);
  heap.used = 60 * MB;
  heap.clock += 599;
  expect(bound.check()).toBeUndefined();
  heap.clock += 1;
  expect(bound.check()).toBeDefined();
});

test('a live heap above the target is collected at twice its size, not at every check', () => {
  const heap = new FakeHeap();
  const bound = new HeapBound(48 * MB, heap);
  heap.live = 70 * MB;
  heap.pauseMs = 1;
  heap.used = 80 * MB;
  bound.check();
  heap.clock += 1000;
  heap.used = 139 * MB;
  expect(bound.check()).toBeUndefined();
  heap.used = 141 * MB;
  expect(bound.check()?.usedBytesAfter).toBe(70 * MB);
  // Once V8's own collections bring the heap under the target, the target rules again.
  heap.clock += 1000;
  heap.used = 40 * MB;
  heap.live = 20 * MB;
  expect(bound.check()).toBeUndefined();
  heap.used = 50 * MB;
  expect(bound.check()?.usedBytesBefore).toBe(50 * MB);
  expect(heap.collections).toBe(3);
});

test('does not start for a target of 0', () => {
  expect(startHeapBound(0, () => undefined)).toBeUndefined();
});

describe('heapTarget in the config', () => {
  const yaml = (line: string): string =>
    `${line}\nupstreams: { app: { url: "http://127.0.0.1:4000" } }\nroutes: [{ name: r, match: { path: /r }, upstream: app }]\n`;

  it('is 48 MB by default, a size as written, and 0 when turned off', () => {
    expect(parseConfigText(yaml(''), 'proxy.yaml', {}).heapTargetBytes).toBe(48 * MB);
    expect(parseConfigText(yaml('heapTarget: 96mb'), 'proxy.yaml', {}).heapTargetBytes).toBe(
      96 * MB,
    );
    expect(parseConfigText(yaml('heapTarget: 0b'), 'proxy.yaml', {}).heapTargetBytes).toBe(0);
  });

  it.each(['-1mb', 'lots', 'true'])('refuses heapTarget: %s with its line', (value) => {
    expect(() => parseConfigText(yaml(`heapTarget: ${value}`), 'proxy.yaml', {})).toThrow(
      /^proxy\.yaml:1:13 heapTarget: /,
    );
  });

  it('needs a restart to change', () => {
    const one = parseConfigText(yaml('heapTarget: 48mb'), 'proxy.yaml', {});
    const two = parseConfigText(yaml('heapTarget: 64mb'), 'proxy.yaml', {});
    expect(restartOnlyChanges(one, two)).toEqual(['heapTarget']);
  });
});
