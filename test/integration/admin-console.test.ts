// The admin console in a real browser (Debian's chromium driven by playwright-core) against a real
// proxy, a real upstream and real records: sign in with the token, see the unknown outcome with its
// stored problem, an in-flight claim and the counters chart, clear the unknown outcome through the
// confirm dialog, and watch the next request with that key execute upstream. Nothing is saved to disk
// but a throwaway browser profile; the assertions are on the page's content.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { postJson } from '../support/http';
import { startProxy, type TestProxy } from '../support/proxy';
import { sleep, startWaitingUpstream, type TestUpstream } from '../support/upstream';
import { testUnless } from '../support/run-report';

const CHROMIUM = '/usr/bin/chromium';
const HAVE_CHROMIUM = existsSync(CHROMIUM);
const browserTest = testUnless(
  !HAVE_CHROMIUM && `no ${CHROMIUM} (apt-get install chromium; .ci/run installs it as root)`,
  'admin-console.test.ts: the console was not tried in a browser',
);

const TOKEN = 'console-browser-token-51c2';
let upstream: TestUpstream;
let proxy: TestProxy;
let context: BrowserContext | undefined;
let profile: string | undefined;

beforeAll(async () => {
  if (!HAVE_CHROMIUM) return;
  upstream = await startWaitingUpstream();
  proxy = await startProxy({
    yaml: `
admin: { token: "${TOKEN}" }
store: { table: "\${TEST_TABLE}" }
upstreams:
  api: { url: ${upstream.url}, timeout: 1s }
  slow: { url: ${upstream.url}, timeout: 30s }
defaults: { lockTimeout: 40s }
routes:
  - { name: orders, match: { path: /orders }, upstream: api, idempotency: {} }
  - { name: slow, match: { path: /slow }, upstream: slow, idempotency: {} }
`,
  });
  profile = mkdtempSync(path.join(tmpdir(), 'console-profile-'));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
});

afterAll(async () => {
  await context?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
  await proxy?.close();
  await upstream?.close();
});

async function signIn(page: Page): Promise<void> {
  await page.goto(`${proxy.adminUrl}/ui`);
  await page.fill('#token', TOKEN);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#console:not([hidden])');
}

browserTest(
  'an operator signs in, sees the unknown outcome, clears it, and the next request executes',
  async () => {
    // Real records: an unknown outcome (the upstream answers after the route's 300 ms timeout),
    // repeated once; an ordinary execution; and a claim still in flight.
    const first = await postJson(`${proxy.url}/orders`, 'order-7-charge', {}, { 'x-wait': '2000' });
    expect(first.status).toBe(504);
    expect((await postJson(`${proxy.url}/orders`, 'order-7-charge', {})).status).toBe(504);
    expect((await postJson(`${proxy.url}/orders`, 'order-8-charge', {})).status).toBe(201);
    const inFlight = postJson(`${proxy.url}/slow`, 'slow-export-1', {}, { 'x-wait': '6000' });
    await sleep(300);

    const page = await context!.newPage();
    const problems: string[] = [];
    page.on('pageerror', (error) => problems.push(error.message));
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(message.text());
    });
    await signIn(page);

    // The token is kept for this tab only.
    // (Strings, not functions: they run in the page, and the tests compile without the DOM types.)
    const stored = await page.evaluate<{ session: string[]; local: string[] }>(
      '({ session: Object.keys(sessionStorage), local: Object.keys(localStorage) })',
    );
    expect(stored).toEqual({ session: ['idempotency-proxy.admin-token'], local: [] });
    expect(page.url()).not.toContain(TOKEN);

    const row = page.locator('#unknown tbody tr', { hasText: 'order-7-charge' });
    await row.waitFor();
    const cells = await row.locator('td').allInnerTexts();
    expect(cells[1]).toBe('orders'); // route
    expect(cells[2]).toBe('order-7-charge'); // key
    expect(cells[4]).toBe('2'); // attempts
    expect(cells[6]).toContain('504');
    expect(cells[6]).toContain('UPSTREAM_TIMEOUT'); // the stored problem
    expect(await page.locator('#unknown tbody tr', { hasText: 'order-8-charge' }).count()).toBe(0);

    const flight = page.locator('#inflight tbody tr', { hasText: 'slow-export-1' });
    await flight.waitFor();
    expect(await flight.locator('td.lease').innerText()).toMatch(/^\d+\.\d s$/);

    // The counters chart has bars, and its legend names the outcomes seen.
    expect(await page.locator('#chart rect.bar').count()).toBeGreaterThan(0);
    const legend = await page.locator('#legend').innerText();
    expect(legend).toMatch(/executed: \d+/);
    expect(legend).toMatch(/replayed: \d+/);

    // The record view: its fields and its timeline.
    await row.locator('button', { hasText: 'View' }).click();
    await page.locator('#record h3', { hasText: 'order-7-charge' }).waitFor();
    const timeline = await page.locator('#record ol.timeline').innerText();
    expect(timeline).toMatch(/claimed[\s\S]*completed[\s\S]*last seen \(attempt 2\)/);
    expect(await page.locator('#record pre').innerText()).toContain('UPSTREAM_TIMEOUT');

    // Clear it: the page asks first.
    await sleep(2_000); // the slow upstream finishes its one execution first
    const executionsBefore = upstream.executions().length;
    const dialogs: string[] = [];
    page.once('dialog', (dialog) => {
      dialogs.push(`${dialog.type()}: ${dialog.message()}`);
      void dialog.accept();
    });
    await row.locator('button', { hasText: 'Clear' }).click();
    await page.locator('#flash', { hasText: 'Cleared "order-7-charge"' }).waitFor();
    expect(dialogs).toHaveLength(1);
    expect(dialogs[0]).toMatch(/^confirm: Clear key "order-7-charge" of scope "orders"\?/);
    await page.locator('#unknown tbody td.empty').waitFor();
    expect(await page.locator('#unknown').innerText()).not.toContain('order-7-charge');

    // The next request with the key executes upstream.
    const again = await postJson(`${proxy.url}/orders`, 'order-7-charge', {});
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBeUndefined();
    expect(upstream.executions()).toHaveLength(executionsBefore + 1);

    // And the search shows the new record: completed with the upstream's status.
    await page.fill('#search-scope', 'orders');
    await page.fill('#search-key', 'order-7-charge');
    await page.click('#search button[type=submit]');
    await page.locator('#record h3', { hasText: 'order-7-charge' }).waitFor();
    const fields = await page.locator('#record dl').innerText();
    expect(fields).toMatch(/state\s+completed/);
    expect(fields).not.toContain('outcome unknown');
    expect(fields).toMatch(/status\s+201/);

    expect((await inFlight).status).toBe(201);
    expect(problems).toEqual([]); // no script error, no CSP violation
    await page.close();
  },
);

browserTest('a wrong token is refused and the page asks again', async () => {
  const page = await context!.newPage();
  await page.goto(`${proxy.adminUrl}/ui`);
  await page.fill('#token', 'not-the-token');
  await page.click('#login-form button[type=submit]');
  await page.locator('#login-error', { hasText: 'refused' }).waitFor();
  expect(await page.locator('#console').isHidden()).toBe(true);
  expect(await page.evaluate<number>('sessionStorage.length')).toBe(0);
  await page.close();
});
