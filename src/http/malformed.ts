// The answer to a request Node's HTTP parser rejected (bad header bytes, oversized headers, …): still
// problem+json, written raw because there is no request object to answer through.
import type { ProxyError } from '../errors';
import { PROBLEM_CONTENT_TYPE, problemBody, problemType } from './problem';

export function malformedRequestAnswer(error: NodeJS.ErrnoException): string {
  const tooLarge = error.code === 'HPE_HEADER_OVERFLOW';
  const body = JSON.stringify({
    type: problemType('BAD_REQUEST'),
    title: tooLarge ? 'Request headers too large' : 'Malformed request',
    status: tooLarge ? 431 : 400,
    detail: tooLarge
      ? 'The request headers are larger than the proxy accepts; send fewer or smaller headers.'
      : `The request is not valid HTTP/1.1 (${error.code ?? 'parse error'}): check for control characters in header names and values.`,
    code: 'BAD_REQUEST',
  });
  const status = tooLarge ? '431 Request Header Fields Too Large' : '400 Bad Request';
  return `HTTP/1.1 ${status}\r\ncontent-type: application/problem+json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}

/** A problem answer written straight to a socket (an upgrade request has no response object). */
export function rawProblemAnswer(error: ProxyError): string {
  const body = JSON.stringify(problemBody(error));
  return `HTTP/1.1 ${error.status} ${error.title}\r\ncontent-type: ${PROBLEM_CONTENT_TYPE}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}
