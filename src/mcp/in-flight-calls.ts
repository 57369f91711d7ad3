// The protected tool calls this process is forwarding, by MCP session and JSON-RPC id. An SDK
// client that times out sends notifications/cancelled for its request, and a server that obeys it
// never answers: the call would become an unknown outcome although the tool may well have run. Once
// a call is claimed its result belongs to every retry (docs/README.md#small-rules: a client that
// hangs up does not cancel the upstream call), so the proxy takes such a cancel itself and lets the
// call finish.
export class InFlightToolCalls {
  private readonly calls = new Map<string, number>();

  add(session: string, idText: string): void {
    const key = entry(session, idText);
    this.calls.set(key, (this.calls.get(key) ?? 0) + 1);
  }

  delete(session: string, idText: string): void {
    const key = entry(session, idText);
    const count = this.calls.get(key) ?? 0;
    if (count <= 1) this.calls.delete(key);
    else this.calls.set(key, count - 1);
  }

  has(session: string, idText: string): boolean {
    return this.calls.has(entry(session, idText));
  }
}

function entry(session: string, idText: string): string {
  return `${session}\u0000${idText}`;
}

/** The session a request belongs to ('' when stateless). */
export function sessionOf(headers: { [name: string]: string | string[] | undefined }): string {
  const session = headers['mcp-session-id'];
  return typeof session === 'string' ? session : '';
}
