// The MCP body reader's decisions (src/mcp/read-body.ts): which Content-Encodings are undone and in
// which order, which charsets pass, what a BOM, a zip bomb and corrupt data become, and the answer
// each reason of the JSON reader gets. Over the wire, with real servers: mcp-unreadable.test.ts.
import zlib from 'node:zlib';
import {
  contentCodings,
  decodeMcpBody,
  jsonRefusal,
  unsupportedCharset,
  withoutBom,
} from '../../src/jsonrpc/read-body';

const MESSAGE = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund"}}';
const LIMIT = 64 * 1024;

async function decode(headers: Record<string, string>, raw: Buffer) {
  return decodeMcpBody(headers, raw, LIMIT);
}

describe('contentCodings', () => {
  it('undoes nothing for no header or identity, and the listed codings last-first', () => {
    expect(contentCodings(undefined)).toEqual([]);
    expect(contentCodings('identity')).toEqual([]);
    expect(contentCodings('gzip')).toEqual(['gzip']);
    expect(contentCodings('X-GZIP')).toEqual(['gzip']);
    expect(contentCodings('gzip, br')).toEqual(['br', 'gzip']);
    expect(contentCodings('deflate,identity , br')).toEqual(['br', 'deflate']);
  });

  it('refuses any other coding with a 415 that names it', () => {
    for (const header of ['compress', 'zstd', 'gzip, zstd', 'gzip;q=1']) {
      const refusal = contentCodings(header);
      expect(refusal).toMatchObject({
        status: 415,
        code: -32000,
        type: 'content_encoding_unsupported',
      });
      expect(Array.isArray(refusal)).toBe(false);
    }
    expect(contentCodings('gzip, compress')).toMatchObject({ message: /"compress"/ });
  });
});

describe('unsupportedCharset', () => {
  it('passes utf-8 in any case, quoted or not, and no charset at all', () => {
    for (const type of [
      undefined,
      'application/json',
      'application/json; charset=utf-8',
      'application/json;charset=UTF-8',
      'application/json; charset="utf-8"',
      'text/plain',
    ])
      expect(unsupportedCharset(type)).toBeUndefined();
  });

  it('refuses every other charset, one hidden from MIMEType included, and a type it cannot parse', () => {
    for (const type of [
      'application/json; charset=utf-16le',
      'application/json; charset=utf8',
      'application/json; charset=latin1',
      // MIMEType takes the first and drops `charset =`; body-parser takes the last and allows it.
      'application/json; charset=utf-8; charset=utf-16le',
      'application/json; charset = utf-16le',
      'not a media type',
    ])
      expect(unsupportedCharset(type)).toMatchObject({
        status: 415,
        code: -32000,
        type: 'charset_unsupported',
      });
    expect(unsupportedCharset('application/json; charset=UTF-16LE')?.message).toContain(
      'charset=UTF-16LE',
    );
  });
});

describe('decodeMcpBody', () => {
  it('inflates gzip, deflate and br, and a list of them in reverse order', async () => {
    const plain = Buffer.from(MESSAGE);
    const cases: [string, Buffer][] = [
      ['gzip', zlib.gzipSync(plain)],
      ['x-gzip', zlib.gzipSync(plain)],
      ['deflate', zlib.deflateSync(plain)],
      ['br', zlib.brotliCompressSync(plain)],
      ['gzip, br', zlib.brotliCompressSync(zlib.gzipSync(plain))],
      ['identity', plain],
    ];
    for (const [encoding, raw] of cases) {
      const read = await decode({ 'content-encoding': encoding }, raw);
      expect(read).toMatchObject({ kind: 'read', decoded: encoding !== 'identity' });
      expect('body' in read && read.body.toString()).toBe(MESSAGE);
    }
  });

  it('drops one BOM, before or inside the compression, and reads the rest', async () => {
    const withBom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(MESSAGE)]);
    for (const [headers, raw] of [
      [{}, withBom],
      [{ 'content-encoding': 'gzip' }, zlib.gzipSync(withBom)],
    ] as const) {
      const read = await decode(headers, raw);
      expect('body' in read && read.body.toString()).toBe(MESSAGE);
    }
    expect(withoutBom(Buffer.from(MESSAGE))).toEqual(Buffer.from(MESSAGE));
    const twice = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), withBom]);
    expect(await decode({}, twice)).toMatchObject({ status: 400, code: -32700 });
  });

  it('stops a zip bomb at the limit: 413, whichever coding carries it', async () => {
    const bomb = zlib.gzipSync(Buffer.alloc(LIMIT * 64));
    expect(bomb.length).toBeLessThan(LIMIT);
    const refused = {
      status: 413,
      code: -32000,
      type: 'request_too_large',
      errorCode: 'REQUEST_TOO_LARGE',
    };
    expect(await decode({ 'content-encoding': 'gzip' }, bomb)).toMatchObject(refused);
    const brBomb = zlib.brotliCompressSync(Buffer.alloc(LIMIT + 1));
    expect(await decode({ 'content-encoding': 'br' }, brBomb)).toMatchObject(refused);
    const atLimit = zlib.gzipSync(Buffer.from(MESSAGE.padEnd(LIMIT, ' ')));
    expect(await decode({ 'content-encoding': 'gzip' }, atLimit)).toMatchObject({ kind: 'read' });
  });

  it('answers corrupt compressed data as a parse error that names the coding', async () => {
    const corrupt = zlib.gzipSync(Buffer.from(MESSAGE)).subarray(0, 12);
    const refusal = await decode({ 'content-encoding': 'gzip' }, corrupt);
    expect(refusal).toMatchObject({ status: 400, code: -32700, type: 'content_encoding_invalid' });
    expect(await decode({ 'content-encoding': 'deflate' }, Buffer.from(MESSAGE))).toMatchObject({
      type: 'content_encoding_invalid',
    });
  });

  it('refuses on the headers before inflating anything', async () => {
    const headers = { 'content-type': 'application/json; charset=utf-16le' };
    expect(await decode(headers, Buffer.from(MESSAGE, 'utf16le'))).toMatchObject({
      status: 415,
      type: 'charset_unsupported',
    });
  });
});

describe('jsonRefusal', () => {
  it('answers each reason with the SDK server’s code and a message saying what to do', () => {
    expect(jsonRefusal('not_utf8')).toMatchObject({ status: 400, code: -32700 });
    expect(jsonRefusal('not_json')).toMatchObject({ status: 400, code: -32700 });
    expect(jsonRefusal('too_deep')).toMatchObject({ status: 400, code: -32600 });
    expect(jsonRefusal('duplicate_key')).toMatchObject({
      status: 400,
      code: -32600,
      errorCode: 'JSON_DUPLICATE_KEY',
    });
    const types = (['not_utf8', 'not_json', 'too_deep', 'duplicate_key'] as const).map(
      (reason) => jsonRefusal(reason).type,
    );
    expect(new Set(types).size).toBe(4);
    for (const reason of ['not_utf8', 'not_json', 'too_deep', 'duplicate_key'] as const)
      expect(jsonRefusal(reason).message).toMatch(/\. Send /);
  });
});
