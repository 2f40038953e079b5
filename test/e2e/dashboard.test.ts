// The dashboard in a real browser (Debian's Chromium, driven by Playwright through
// `executablePath`) against a real server: signing in with a team's key, a sandbox the SDK
// creates appearing, a fork tree growing as it forks, typing in a terminal into the sandbox,
// the node view needing the admin token and the teams it shows, a template's build and its
// log. Screenshots go to test-results/dashboard/ (kept as the run's artifacts).
import assert from "node:assert/strict";
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Sandbox, Template } from "e2b";
import { type Browser, chromium, type Locator, type Page } from "playwright-core";
import { useServer } from "../helpers/server.js";

const ROOT = join(import.meta.dirname, "..", "..");
const ARTIFACTS = join(ROOT, "test-results", "dashboard");
const CHROMIUM = process.env.WARREN_TEST_CHROMIUM ?? "/usr/bin/chromium";
const server = useServer();
const text = async (locator: Locator) => (await locator.textContent()) ?? "";

describe("the dashboard in Chromium", () => {
  let browser: Browser;
  let page: Page;
  const sandboxes: Sandbox[] = [];
  /** What the page logged and which of its requests failed: said when a step fails. */
  const consoleLines: string[] = [];
  const shot = (name: string) =>
    page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });

  before(async () => {
    await mkdir(ARTIFACTS, { recursive: true });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      // As root in CI: no setuid sandbox. No network beyond the test's own server.
      args: [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
      ],
    });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.setDefaultTimeout(30_000);
    page.on("console", (message) => consoleLines.push(`${message.type()}: ${message.text()}`));
    page.on("requestfailed", (request) =>
      consoleLines.push(
        `request failed: ${request.method()} ${request.url()} ${request.failure()?.errorText}`,
      ),
    );
  });
  after(async () => {
    await Promise.allSettled(sandboxes.map((s) => s.kill()));
    await browser?.close();
  });

  it("asks for an API key or the admin token and refuses a wrong one", async () => {
    const res = await page.goto(`${server.url}/dashboard`);
    assert.equal(res?.status(), 200);
    assert.equal(new URL(page.url()).pathname, "/dashboard/", "redirected into the app");
    await page.locator("#api-key").waitFor();
    await shot("01-sign-in");
    await page.fill("#api-key", "not-the-key");
    await page.click("button[type=submit]");
    await page.locator("#login-error", { hasText: "refused" }).waitFor();
    await page.fill("#api-key", server.apiKey);
    await page.click("button[type=submit]");
    await page.locator("h2", { hasText: "Sandboxes" }).waitFor();
  });

  it("shows a sandbox the SDK creates, with its live state", async () => {
    const sandbox = await Sandbox.create({ metadata: { from: "dashboard-test" } });
    sandboxes.push(sandbox);
    const row = page.locator(`tr[data-sandbox="${sandbox.sandboxId}"]`);
    await row.waitFor();
    assert.match(await text(row), /running/);
    assert.match(await text(row), /from=dashboard-test/);
    await shot("02-sandboxes");
    await sandbox.pause();
    await row.locator(".badge.paused").waitFor();
    await sandbox.connect();
    await row.locator(".badge.running").waitFor();
  });

  it("draws the fork tree as it grows", async () => {
    const source = sandboxes[0] as Sandbox;
    await page.goto(`${server.url}/dashboard/#/forks`);
    const root = page.locator(`li[data-node="${source.sandboxId}"]`);
    await root.waitFor();
    const children = (await source.fork({ count: 2 })).filter(
      (c): c is Sandbox => c instanceof Sandbox,
    );
    sandboxes.push(...children);
    assert.equal(children.length, 2);
    for (const child of children) {
      await root.locator(`ul li[data-node="${child.sandboxId}"]`).waitFor();
    }
    const [first] = children;
    const grandchildren = (await (first as Sandbox).fork({ count: 1 })).filter(
      (c): c is Sandbox => c instanceof Sandbox,
    );
    sandboxes.push(...grandchildren);
    const grandchild = grandchildren[0] as Sandbox;
    // Under its parent, under the source: three levels.
    await root
      .locator(
        `li[data-node="${(first as Sandbox).sandboxId}"] li[data-node="${grandchild.sandboxId}"]`,
      )
      .waitFor();
    assert.match(await text(root), /forked · capture/);
    await shot("03-fork-tree");
  });

  it("opens a terminal into a sandbox and takes typing; charts and logs are there", async () => {
    const sandbox = sandboxes[0] as Sandbox;
    await page.goto(`${server.url}/dashboard/#/sandbox/${sandbox.sandboxId}`);
    await page.locator("h2", { hasText: sandbox.sandboxId }).waitFor();
    await page.click('button[data-action="open terminal"]');
    const screen = page.locator("#terminal .xterm-rows");
    await screen.waitFor();
    await screen.filter({ hasText: "$" }).waitFor(); // the shell's prompt
    await page.click("#terminal");
    await page.keyboard.type("echo dash-$((6*7)) from $(whoami)\n");
    await screen
      .filter({ hasText: "dash-42 from user" })
      .waitFor()
      .catch(async (err) => {
        await shot("04-terminal-failed");
        const shown = await text(screen);
        throw new Error(`${err}\nterminal: ${shown}\nbrowser: ${consoleLines.join("\n")}`);
      });
    assert.equal(await page.locator(".charts .uplot").count(), 2, "CPU and memory charts");
    await page.locator("#logs", { hasText: "sandbox.created" }).waitFor();
    await shot("04-terminal");
  });

  it("a team's key gets a note on the node view; the admin token shows the node and the teams", async () => {
    await page.goto(`${server.url}/dashboard/#/node`);
    await page.locator("#node", { hasText: "needs the admin token" }).waitFor();
    await page.click("#logout");
    const adminToken = (await readFile(join(server.dataDir, "secrets", "admin-token"), "utf8"))
      .split("\n")[0]
      ?.trim();
    await page.fill("#api-key", adminToken ?? "");
    await page.click("button[type=submit]");
    await page.locator("#signed-in", { hasText: "admin" }).waitFor();
    // The admin sees the default team's sandboxes too (the SDK's key is that team's).
    await page.locator(`tr[data-sandbox="${(sandboxes[0] as Sandbox).sandboxId}"]`).waitFor();
    await page.goto(`${server.url}/dashboard/#/node`);
    await page.locator("#node", { hasText: "VMs admitted" }).waitFor();
    assert.match(await text(page.locator("#node")), /vCPUs: \d+ of \d+/);
    assert.match(await text(page.locator("#node")), /\d+ VMMs? ready for \d+ templates?/);
    await shot("05-node");
    await page.goto(`${server.url}/dashboard/#/teams`);
    await page.locator("#teams td", { hasText: /^default$/ }).waitFor();
    assert.match(await text(page.locator("#teams")), /\d+ of (\d+|∞)/, "usage of the quotas");
    await shot("05-teams");
  });

  it("shows the templates with their builds", async () => {
    await page.goto(`${server.url}/dashboard/#/templates`);
    await page.locator("td", { hasText: "base" }).first().waitFor();
    assert.match(await text(page.locator("#builds")), /None: made from a sandbox's snapshot/);
  });

  it("shows a template's build as it runs, with its log", async () => {
    const built = Template().fromBaseImage().runCmd("echo dashboard-$((40+2)) > /tmp/built");
    const info = await Template.buildInBackground(built, "dashboard-built");
    const row = page.locator(`tr[data-template="${info.templateId}"]`);
    await row.waitFor();
    await row.locator("button").click();
    await page.locator(`#builds li[data-build="${info.buildId}"]`).waitFor();
    // The build's log, read on as it grows, reaches the step and the end.
    const log = page.locator("#build-log");
    await log.filter({ hasText: "dashboard-$((40+2))" }).waitFor({ timeout: 120_000 });
    await row.locator(".badge.ready").waitFor({ timeout: 120_000 });
    await page.locator(`#builds li[data-build="${info.buildId}"] .badge.ready`).waitFor();
    const lines = (await text(log)).split("\n").filter(Boolean);
    assert.equal(
      new Set(lines).size,
      lines.length,
      `no log line shown twice:\n${lines.join("\n")}`,
    );
    await shot("06-template-build");
  });
});
