// The ports drawn for the embedded PostgreSQL and for test servers: never one that fetch refuses to
// call, so a proxy or an upstream started on one can always be reached with fetch.
import {
  ephemeralRangeStart,
  findFreePort,
  LOWEST_DRAWN_PORT,
  REFUSED_BY_FETCH,
} from '../../src/embedded/embedded';

afterEach(() => jest.restoreAllMocks());

test.each([...REFUSED_BY_FETCH])(
  'fetch refuses port %d, the reason it is never drawn',
  async (port) => {
    const refused = await fetch(`http://127.0.0.1:${port}/`).catch((error: Error) => error);
    expect((refused as Error & { cause?: Error }).cause?.message).toBe('bad port');
  },
);

test('a draw that lands on a port fetch refuses draws again', async () => {
  const [refused] = [...REFUSED_BY_FETCH] as [number];
  const span = ephemeralRangeStart() - LOWEST_DRAWN_PORT;
  // The first draw lands on the refused port, the next one on the port above it.
  jest
    .spyOn(Math, 'random')
    .mockReturnValueOnce((refused - LOWEST_DRAWN_PORT + 0.5) / span)
    .mockReturnValueOnce((refused + 1 - LOWEST_DRAWN_PORT + 0.5) / span);
  const port = await findFreePort();
  expect(port).not.toBe(refused);
});
