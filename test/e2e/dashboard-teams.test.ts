// The dashboard's sign-in with a team's key or the admin token, in a real browser (Debian's
// Chromium through Playwright), against the fake of the teams API (test/fakes/
// fake-teams-api.ts) serving the built dashboard: which credential each request carries,
// a team seeing only its own sandboxes and a note instead of the node, the admin seeing every
// team's, the node and the teams with their quotas. No VMs: the sandboxes are the fake's.
import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type Browser, chromium, type Locator, type Page } from "playwright-core";
import { FakeTeamsApi } from "../fakes/fake-teams-api.js";

const ROOT = join(import.meta.dirname, "..", "..");
const ARTIFACTS = join(ROOT, "test-results", "dashboard");
const CHROMIUM = process.env.WARREN_TEST_CHROMIUM ?? "/usr/bin/chromium";
const text = async (locator: Locator) => (await locator.textContent()) ?? "";

describe("the dashboard's teams: a team's key or the admin token", () => {
  let browser: Browser;
  let page: Page;
  let fake: FakeTeamsApi;
  const shot = (name: string) =>
    page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });

  before(async () => {
    await mkdir(ARTIFACTS, { recursive: true });
    fake = await new FakeTeamsApi({ dashboardDir: join(ROOT, "dist", "dashboard") }).start();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
    });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.setDefaultTimeout(30_000);
  });
  after(async () => {
    await browser?.close();
    await fake?.stop();
  });

  const signIn = async (secret: string) => {
    await page.goto(`${fake.url}/dashboard/`);
    await page.locator("#api-key").waitFor();
    await page.fill("#api-key", secret);
    await page.click("button[type=submit]");
  };
  /** The API requests (not the page's files, nor the browser's favicon) made since `from`. */
  const apiRequestsSince = (from: number) =>
    fake.requests
      .slice(from)
      .filter((r) => !r.path.startsWith("/dashboard") && r.path !== "/favicon.ico");

  it("with a team's key: that team's sandboxes only, no teams view, a note instead of the node", async () => {
    const mine = fake.addTeam("mine", { maxSandboxes: 3 });
    const theirs = fake.addTeam("theirs");
    const own = fake.addSandbox(mine.teamID, { metadata: { who: "mine" } });
    const other = fake.addSandbox(theirs.teamID);
    const key = fake.addKey(mine.teamID, "dashboard").key;

    await signIn("not-a-key-or-token");
    await page.locator("#login-error", { hasText: "refused" }).waitFor();

    const from = fake.requests.length;
    await signIn(key);
    await page.locator(`tr[data-sandbox="${own.sandboxID}"]`).waitFor();
    assert.equal(await page.locator(`tr[data-sandbox="${other.sandboxID}"]`).count(), 0);
    assert.match(await text(page.locator("#signed-in")), /team's API key/);
    assert.equal(await page.locator('nav a[href="#/teams"]').count(), 0);
    for (const request of apiRequestsSince(from)) {
      assert.equal(request.headers["x-api-key"], key, `${request.method} ${request.path}`);
      assert.equal(request.headers["x-admin-token"], undefined);
    }
    await page.goto(`${fake.url}/dashboard/#/node`);
    await page.locator("#node", { hasText: "needs the admin token" }).waitFor();
    assert.ok(await page.locator("#banner").isHidden(), "a 403 there is no error");
    await shot("teams-01-team-key-node");
    await page.goto(`${fake.url}/dashboard/#/teams`);
    await page.locator("h2", { hasText: "Sandboxes" }).waitFor();
    await page.click("#logout");
    await page.locator("#api-key").waitFor();
  });

  it("with the admin token: every team's sandboxes, the node, and the teams with their quotas", async () => {
    const from = fake.requests.length;
    await signIn(fake.adminToken);
    for (const sandbox of fake.sandboxes)
      await page.locator(`tr[data-sandbox="${sandbox.sandboxID}"]`).waitFor();
    assert.match(await text(page.locator("#signed-in")), /admin/);
    // Tried as a key first (refused), then as the admin token; from then on the token only.
    const [probe, ...rest] = apiRequestsSince(from);
    assert.equal(probe?.headers["x-api-key"], fake.adminToken);
    assert.ok(rest.length > 0);
    for (const request of rest) {
      assert.equal(request.headers["x-admin-token"], fake.adminToken, request.path);
      assert.equal(request.headers["x-api-key"], undefined, request.path);
    }

    await page.click('nav a[href="#/node"]');
    await page.locator("#node", { hasText: "VMs admitted" }).waitFor();
    assert.match(await text(page.locator("#node")), /vCPUs: 4 of 32/);

    await page.click('nav a[href="#/teams"]');
    const mine = [...fake.teams.values()].find((t) => t.name === "mine");
    assert.ok(mine);
    const row = page.locator(`tr[data-team="${mine.teamID}"]`);
    await row.waitFor();
    assert.match(await text(row), /mine/);
    assert.match(await text(row), /1 of 3/, "sandboxes used of the quota");
    assert.match(await text(row), /512 MiB of ∞/, "memory, unlimited");
    await page.locator('tr[data-team="default"]').waitFor();
    await shot("teams-02-admin-teams");

    // A reload keeps the tab signed in as the admin.
    await page.reload();
    await row.waitFor();
  });
});
