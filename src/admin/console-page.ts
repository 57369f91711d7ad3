// The admin console (GET /ui): one self-contained page, no framework, no external assets. A small
// page with four tables, a form and a chart does not need one, and without one there is no build
// step and nothing to keep patched. The page is public (it holds no data); everything it shows comes
// from /api with the bearer token the operator types, kept in sessionStorage (this tab only).
// Record data (keys come from clients) is only ever set as text, never as HTML; the CSP allows
// exactly this page's inline script and style, by hash.
import { createHash } from 'node:crypto';
import type http from 'node:http';
import { problem } from './admin-http';

const STYLE = `
:root { font: 14px/1.4 system-ui, sans-serif; color: #1d2330; background: #f6f7f9; }
body { margin: 0; }
header { display: flex; gap: 1rem; align-items: center; padding: .6rem 1.2rem; background: #1d2330; color: #fff; }
header h1 { font-size: 1.1rem; margin: 0; flex: 1; }
main, #login { padding: 0 1.2rem 2rem; max-width: 1200px; }
section { background: #fff; border: 1px solid #dde1e7; border-radius: 6px; margin: 1rem 0; padding: .4rem 1rem 1rem; }
h2 { font-size: 1rem; margin: .6rem 0; }
.hint { color: #5b6474; margin: .2rem 0 .6rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #eceff3; vertical-align: top; }
th { font-weight: 600; color: #5b6474; font-size: .85rem; }
td.key, td.mono, .mono { font-family: ui-monospace, monospace; word-break: break-all; }
td.empty { color: #5b6474; font-style: italic; }
button { font: inherit; padding: .25rem .7rem; border-radius: 4px; border: 1px solid #b7bfcc; background: #fff; cursor: pointer; }
button.danger { border-color: #c0392b; color: #c0392b; }
button.danger:hover { background: #c0392b; color: #fff; }
input, select { font: inherit; padding: .25rem .4rem; border: 1px solid #b7bfcc; border-radius: 4px; }
form { display: flex; gap: .6rem; flex-wrap: wrap; align-items: end; }
label { display: flex; flex-direction: column; font-size: .85rem; color: #5b6474; gap: .15rem; }
#flash { min-height: 1.4em; color: #1e7d3a; }
#flash.error, #login-error { color: #c0392b; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; }
dt { color: #5b6474; }
dd { margin: 0; }
ol.timeline { list-style: none; padding-left: 1rem; border-left: 2px solid #b7bfcc; }
ol.timeline li { position: relative; margin: .4rem 0; }
ol.timeline li::before { content: ''; position: absolute; left: -1.38rem; top: .35rem; width: .6rem; height: .6rem; border-radius: 50%; background: #4a6fa5; }
ol.timeline li.settled_unknown::before, ol.timeline li.taken_over::before { background: #c0392b; }
pre { background: #f1f3f6; padding: .5rem; overflow: auto; max-height: 16rem; }
#legend { display: flex; gap: 1rem; flex-wrap: wrap; list-style: none; padding: 0; }
`;

const SCRIPT = `
'use strict';
(() => {
  const TOKEN_KEY = 'idempotency-proxy.admin-token';
  const REFRESH_MS = 5000;
  const COLORS = { executed: '#2e8b57', replayed: '#4a6fa5', in_flight: '#e09f3e', mismatch: '#9b59b6',
    upstream_error: '#c0392b', store_unavailable: '#7f1d1d', passthrough: '#9aa5b1', missing_key: '#d4a017',
    invalid_key: '#b8860b', too_large: '#8b4513', deferred: '#1b998b', polled: '#8fbfb5' };
  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem(TOKEN_KEY);
  let timer;
  let unknownCursor = null;
  let unknownPaged = false;

  function el(tag, options, children) {
    const node = document.createElement(tag);
    if (options && options.text !== undefined) node.textContent = String(options.text);
    if (options && options.cls) node.className = options.cls;
    if (options && options.title) node.title = options.title;
    for (const child of children || []) node.append(child);
    return node;
  }
  function svg(tag, attrs) {
    const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const name of Object.keys(attrs)) node.setAttribute(name, String(attrs[name]));
    return node;
  }
  function flash(text, error) {
    $('flash').textContent = text;
    $('flash').className = error ? 'error' : '';
  }
  function ago(iso) {
    const s = Math.round((Date.now() - Date.parse(iso)) / 1000);
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.round(s / 60) + ' min ago';
    return Math.round(s / 3600) + ' h ago';
  }
  function when(iso) {
    return iso ? new Date(iso).toLocaleString() + ' (' + ago(iso) + ')' : '—';
  }
  function shortTenant(tenant) {
    return tenant ? tenant.slice(0, 12) + '…' : '(none)';
  }

  async function api(method, path) {
    const res = await fetch(path, { method, headers: { authorization: 'Bearer ' + token }, cache: 'no-store' });
    const text = await res.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch { body = text; }
    if (res.status === 401) {
      logout('The token was refused. Type the admin token (admin.token) again.');
      throw new Error('unauthorized');
    }
    if (!res.ok) throw new Error((body && body.detail) || 'HTTP ' + res.status);
    return body;
  }
  function recordPath(scope, key, query) {
    return '/api/records/' + encodeURIComponent(scope) + '/' + encodeURIComponent(key) + '?' + query;
  }

  function login(event) {
    event.preventDefault();
    token = $('token').value.trim();
    $('token').value = '';
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    start();
  }
  function logout(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    token = null;
    clearTimeout(timer);
    $('console').hidden = true;
    $('logout').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = message || '';
  }
  async function start() {
    try {
      const scopes = await api('GET', '/api/scopes');
      $('login').hidden = true;
      $('console').hidden = false;
      $('logout').hidden = false;
      $('login-error').textContent = '';
      const list = $('scopes');
      list.replaceChildren(...scopes.scopes.map((s) => {
        const option = el('option', { text: s.scope });
        option.value = s.scope;
        return option;
      }));
      await refresh();
    } catch (error) {
      if (error.message !== 'unauthorized') $('login-error').textContent = 'Cannot reach the admin API: ' + error.message;
    }
  }
  async function refresh() {
    clearTimeout(timer);
    try {
      await Promise.all([unknownPaged ? null : loadUnknown(false), loadInFlight(), loadReconciled(), loadCounters()]);
      $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    } catch (error) {
      if (error.message === 'unauthorized') return;
      flash('Refresh failed: ' + error.message, true);
    }
    if (token) timer = setTimeout(refresh, REFRESH_MS);
  }

  function clearButton(record) {
    const button = el('button', { text: 'Clear…', cls: 'danger', title: 'Delete this record so the next request executes' });
    button.addEventListener('click', () => clearRecord(record));
    return button;
  }
  function viewButton(record) {
    const button = el('button', { text: 'View' });
    button.addEventListener('click', () => showRecord(record.scope, record.key, 'tenantHash=' + encodeURIComponent(record.tenant)));
    return button;
  }
  function problemText(problem) {
    if (!problem) return '';
    if (typeof problem === 'string') return problem;
    return [problem.status, problem.code, problem.detail].filter((part) => part !== undefined).join(' · ');
  }
  function reconcileText(reconcile) {
    if (reconcile === 'given_up') return ' · reconcile gave up: only a clear settles it';
    if (reconcile === 'probing') return ' · reconcile is probing the upstream';
    return '';
  }
  function emptyRow(tbody, columns, text) {
    const td = el('td', { text, cls: 'empty' });
    td.colSpan = columns;
    tbody.append(el('tr', {}, [td]));
  }

  async function loadUnknown(more) {
    const query = 'state=unknown&limit=50' + (more && unknownCursor ? '&cursor=' + encodeURIComponent(unknownCursor) : '');
    const page = await api('GET', '/api/records?' + query);
    const tbody = $('unknown').tBodies[0];
    if (!more) tbody.replaceChildren();
    for (const r of page.records) {
      tbody.append(el('tr', {}, [
        el('td', { text: ago(r.lastSeenAt), title: r.lastSeenAt }),
        el('td', { text: r.route }),
        el('td', { text: r.key, cls: 'key' }),
        el('td', { text: shortTenant(r.tenant), cls: 'mono', title: r.tenant }),
        el('td', { text: r.attempts }),
        el('td', { text: ago(r.createdAt), title: r.createdAt }),
        el('td', { text: problemText(r.problem) + reconcileText(r.reconcile), cls: 'problem' }),
        el('td', {}, [viewButton(r), ' ', clearButton(r)]),
      ]));
    }
    if (!more && page.records.length === 0) emptyRow(tbody, 8, 'No unknown outcomes: nothing waits for a decision.');
    unknownCursor = page.nextCursor;
    $('unknown-more').hidden = !page.nextCursor;
    $('unknown-newest').hidden = !unknownPaged;
  }
  async function loadInFlight() {
    const page = await api('GET', '/api/records?state=in_flight&limit=100');
    const tbody = $('inflight').tBodies[0];
    tbody.replaceChildren();
    for (const r of page.records) {
      const left = r.leaseLeftMs > 0 ? (r.leaseLeftMs / 1000).toFixed(1) + ' s' : 'ended (a repeat settles it)';
      tbody.append(el('tr', {}, [
        el('td', { text: r.route }),
        el('td', { text: r.key, cls: 'key' }),
        el('td', { text: shortTenant(r.tenant), cls: 'mono', title: r.tenant }),
        el('td', { text: r.attempts }),
        el('td', { text: ago(r.createdAt), title: r.createdAt }),
        el('td', { text: left, cls: 'lease' }),
        el('td', {}, [viewButton(r)]),
      ]));
    }
    if (page.records.length === 0) emptyRow(tbody, 7, 'No claims in flight.');
  }

  async function loadReconciled() {
    const page = await api('GET', '/api/records?state=reconciled&limit=50');
    const tbody = $('reconciled').tBodies[0];
    tbody.replaceChildren();
    for (const r of page.records) {
      tbody.append(el('tr', {}, [
        el('td', { text: ago(r.completedAt), title: r.completedAt }),
        el('td', { text: r.route }),
        el('td', { text: r.key, cls: 'key' }),
        el('td', { text: shortTenant(r.tenant), cls: 'mono', title: r.tenant }),
        el('td', { text: r.status }),
        el('td', { text: r.attempts }),
        el('td', {}, [viewButton(r)]),
      ]));
    }
    if (page.records.length === 0) emptyRow(tbody, 7, 'No unknown outcome has been reconciled with its upstream.');
  }

  async function loadCounters() {
    const data = await api('GET', '/api/counters');
    const chart = $('chart');
    const width = 900, height = 160, top = 10, bottom = 20;
    const n = data.buckets.length;
    const barWidth = width / n;
    const sums = data.buckets.map((b) => Object.values(b.counts).reduce((a, c) => a + c, 0));
    const max = Math.max(1, ...sums);
    const outcomes = Object.keys(data.totals).sort((a, b) => data.totals[b] - data.totals[a]);
    const palette = ['#16a085', '#8e44ad', '#2c3e50', '#d35400', '#7f8c8d'];
    const color = (o) => COLORS[o] || palette[outcomes.indexOf(o) % palette.length];
    chart.replaceChildren(svg('line', { x1: 0, x2: width, y1: height - bottom, y2: height - bottom, stroke: '#b7bfcc' }));
    data.buckets.forEach((bucket, i) => {
      let y = height - bottom;
      for (const outcome of outcomes) {
        const count = bucket.counts[outcome] || 0;
        if (!count) continue;
        const h = (count / max) * (height - top - bottom);
        y -= h;
        const rect = svg('rect', { x: i * barWidth + 0.5, y, width: Math.max(1, barWidth - 1), height: h, fill: color(outcome), class: 'bar', 'data-outcome': outcome });
        const title = svg('title', {});
        title.textContent = new Date(bucket.start).toLocaleTimeString() + ' ' + outcome + ': ' + count;
        rect.append(title);
        chart.append(rect);
      }
    });
    const label = svg('text', { x: 0, y: height - 4, 'font-size': 11, fill: '#5b6474' });
    label.textContent = '15 min ago';
    const now = svg('text', { x: width, y: height - 4, 'font-size': 11, fill: '#5b6474', 'text-anchor': 'end' });
    now.textContent = 'now (bars of ' + data.bucketSeconds + ' s, peak ' + max + ')';
    chart.append(label, now);
    $('legend').replaceChildren(...outcomes.map((o) => {
      const swatch = svg('svg', { width: 10, height: 10 });
      swatch.append(svg('rect', { width: 10, height: 10, fill: color(o) }));
      return el('li', { cls: 'outcome' }, [swatch, ' ' + o + ': ' + data.totals[o]]);
    }));
    if (outcomes.length === 0) $('legend').append(el('li', { text: 'No requests answered in the last 15 minutes.' }));
  }

  async function clearRecord(record) {
    const ok = confirm('Clear key "' + record.key + '" of scope "' + record.scope + '"?\\n\\n' +
      'The next request with this key will be forwarded to the upstream again. Clear it only after ' +
      'checking that the upstream did not act on it, or that acting twice is safe.');
    if (!ok) return;
    try {
      await api('DELETE', recordPath(record.scope, record.key, 'tenantHash=' + encodeURIComponent(record.tenant)));
      flash('Cleared "' + record.key + '" (' + record.scope + '): the next request with this key executes.');
      if ($('record').dataset.id === record.scope + '/' + record.key + '/' + record.tenant) $('record').replaceChildren();
      unknownPaged = false;
      await refresh();
    } catch (error) {
      if (error.message !== 'unauthorized') flash('Clear failed: ' + error.message, true);
    }
  }

  async function search(event) {
    event.preventDefault();
    const scope = $('search-scope').value.trim();
    const key = $('search-key').value.trim();
    const tenant = $('search-tenant').value;
    if (!scope || !key) return;
    await showRecord(scope, key, tenant ? 'tenant=' + encodeURIComponent(tenant) : '');
  }
  async function showRecord(scope, key, tenantQuery) {
    const box = $('record');
    box.replaceChildren();
    let r;
    try {
      r = await api('GET', recordPath(scope, key, tenantQuery + (tenantQuery ? '&' : '') + 'body=1'));
    } catch (error) {
      if (error.message !== 'unauthorized') box.append(el('p', { text: error.message, cls: 'hint' }));
      return;
    }
    box.dataset.id = r.scope + '/' + r.key + '/' + r.tenant;
    const fields = [
      ['scope', r.scope], ['route', r.route], ['key', r.key], ['tenant', r.tenant || '(none)'],
      ['state', r.state + (r.outcomeUnknown ? ' — outcome unknown' : '') + (r.expired ? ' (expired)' : '')],
      ['status', r.status === null ? '—' : r.status], ['attempts', r.attempts], ['replays', r.replays],
      ['fence', r.fence], ['first seen', when(r.createdAt)], ['completed', when(r.completedAt)],
      ['last seen', when(r.lastSeenAt)], ['lease until', when(r.leaseExpiresAt)], ['expires', when(r.expiresAt)],
    ];
    const dl = el('dl', { cls: 'fields' });
    for (const [name, value] of fields) dl.append(el('dt', { text: name }), el('dd', { text: value, cls: name === 'key' || name === 'tenant' ? 'mono' : '' }));
    const events = r.history.map((e) => ({ at: e.at, name: e.event, text: e.event + ' (fence ' + e.fence + (e.status !== undefined ? ', status ' + e.status : '') + ')' }));
    events.push({ at: r.lastSeenAt, name: 'last_seen', text: 'last seen (attempt ' + r.attempts + ')' });
    events.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
    const timeline = el('ol', { cls: 'timeline' }, events.map((e) =>
      el('li', { cls: e.name }, [el('span', { text: new Date(e.at).toLocaleString() + ' — ', cls: 'at' }), e.text])));
    box.append(el('h3', { text: r.key }), dl, el('h4', { text: 'Timeline' }), timeline);
    if (r.body) box.append(el('h4', { text: 'Stored body (' + r.body.encoding + ')' }), el('pre', { text: r.body.data }));
    const partial = r.partialUpstreamAnswer;
    if (partial) {
      const kept = partial.cut ? ', only the first ' + partial.storedBytes + ' kept' : '';
      box.append(
        el('h4', { text: 'Partial upstream answer (broke off; never replayed)' }),
        el('p', { text: 'status ' + partial.status + ', ' + partial.bytes + ' body bytes sent' + kept, cls: 'hint' }),
        el('pre', { text: partial.headers.map(([name, value]) => name + ': ' + value).join('\\n') }),
      );
      if (partial.body) box.append(el('h4', { text: 'Partial body (' + partial.body.encoding + ')' }), el('pre', { text: partial.body.data }));
    }
    const clear = clearButton(r);
    clear.textContent = 'Clear this record…';
    box.append(clear);
  }

  $('login-form').addEventListener('submit', login);
  $('logout').addEventListener('click', () => logout(''));
  $('search').addEventListener('submit', search);
  $('unknown-more').addEventListener('click', () => { unknownPaged = true; loadUnknown(true).catch((e) => flash(e.message, true)); });
  $('unknown-newest').addEventListener('click', () => { unknownPaged = false; refresh(); });
  if (token) start();
})();
`;

const BODY = `
<header><h1>idempotency-proxy console</h1><span id="updated"></span><button id="logout" hidden>Forget token</button></header>
<section id="login">
  <h2>Sign in</h2>
  <form id="login-form">
    <label>Admin token (admin.token)<input id="token" type="password" autocomplete="off" required></label>
    <button type="submit">Open the console</button>
  </form>
  <p id="login-error" role="alert"></p>
  <p class="hint">The token stays in this tab (sessionStorage) and is sent only to this listener's /api.</p>
</section>
<main id="console" hidden>
  <p id="flash" role="status"></p>
  <section>
    <h2>Unknown outcomes: waiting for a decision</h2>
    <p class="hint">These requests may have run upstream: every repeat is answered with the stored problem, never forwarded.
    Check the upstream; clear a key only if the request did not take effect there (or running it again is harmless). The next request with a cleared key executes.</p>
    <table id="unknown"><thead><tr><th>last seen</th><th>route</th><th>key</th><th>tenant</th><th>attempts</th><th>first seen</th><th>stored problem</th><th></th></tr></thead><tbody></tbody></table>
    <button id="unknown-more" hidden>Older…</button> <button id="unknown-newest" hidden>Back to the newest</button>
  </section>
  <section>
    <h2>Reconciled with the upstream</h2>
    <p class="hint">Unknown outcomes a probe (idempotency.reconcile) found upstream: every repeat now gets the upstream's answer, marked Idempotency-Outcome: reconciled.</p>
    <table id="reconciled"><thead><tr><th>reconciled</th><th>route</th><th>key</th><th>tenant</th><th>status</th><th>attempts</th><th></th></tr></thead><tbody></tbody></table>
  </section>
  <section>
    <h2>In-flight claims</h2>
    <table id="inflight"><thead><tr><th>route</th><th>key</th><th>tenant</th><th>attempts</th><th>claimed</th><th>lease left</th><th></th></tr></thead><tbody></tbody></table>
  </section>
  <section>
    <h2>Answers per outcome, last 15 minutes (this instance)</h2>
    <svg id="chart" viewBox="0 0 900 160" width="100%" height="160" role="img" aria-label="requests per outcome per 10 seconds"></svg>
    <ul id="legend"></ul>
  </section>
  <section>
    <h2>Find a record</h2>
    <form id="search">
      <label>scope (route or group)<input id="search-scope" list="scopes" required></label>
      <label>key<input id="search-key" required></label>
      <label>tenant value, if the scope has one<input id="search-tenant" autocomplete="off"></label>
      <button type="submit">Show</button>
      <datalist id="scopes"></datalist>
    </form>
    <div id="record"></div>
  </section>
</main>
`;

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

/** The page and its headers, built once: the CSP names the hashes of its one script and style. */
const PAGE = Buffer.from(
  `<!doctype html>\n<html lang="en"><head><meta charset="utf-8">` +
    `<meta name="viewport" content="width=device-width, initial-scale=1">` +
    `<link rel="icon" href="data:,"><title>idempotency-proxy console</title><style>${STYLE}</style></head>` +
    `<body>${BODY}<script>${SCRIPT}</script></body></html>\n`,
);

export const CONSOLE_CSP = [
  "default-src 'self'",
  `script-src ${sha256(SCRIPT)}`,
  `style-src ${sha256(STYLE)}`,
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

export function sendConsolePage(res: http.ServerResponse, enabled: boolean): void {
  if (!enabled) {
    return problem(
      res,
      404,
      'The console is off',
      'Set admin.token (e.g. ADMIN_TOKEN) to enable the console (/ui) and its API (/api).',
    );
  }
  res.writeHead(200, {
    'content-type': 'text/html; charset=utf-8',
    'content-length': PAGE.length,
    'content-security-policy': CONSOLE_CSP,
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
  });
  res.end(PAGE);
}
