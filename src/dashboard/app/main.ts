import type { NodeView } from "../../protocol/node-view.js";
import {
  ApiError,
  type BuildStatus,
  call,
  credential,
  get,
  getAll,
  identify,
  type Lineage,
  type ListedSandbox,
  type LogEntry,
  type Metric,
  type SandboxDetail,
  setCredential,
  type TeamSummary,
  type TemplateDetail,
  type TemplateSummary,
} from "./api.js";
import { MetricCharts } from "./charts.js";
import { el, idFromUrl, since, table } from "./dom.js";
import { openTerminal } from "./terminal.js";

/**
 * Warren's dashboard: a page of the node server (`/dashboard/`), talking to its API with
 * what the user signs in with: a team's API key (that team's sandboxes and templates) or
 * the node's admin token (every team's, the node, the teams). Views by URL hash: sandboxes,
 * one sandbox (charts, logs, a terminal), fork trees, templates and their builds, the node,
 * the teams (admin). Each view refreshes itself every REFRESH_MS while shown; leaving it
 * stops that.
 */

const REFRESH_MS = 2_000;
const root = document.getElementById("app") as HTMLElement;

/** What the shown view must undo when another takes its place. */
let leaveView: (() => void) | undefined;

function show(view: () => (() => void) | undefined): void {
  leaveView?.();
  leaveView = view();
}

/** Runs `tick` now and every REFRESH_MS until the view is left; errors go to the banner. */
function every(tick: () => Promise<void>): () => void {
  let stopped = false;
  const run = async () => {
    try {
      await tick();
      banner("");
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) return logOut(REFUSED);
      banner(err instanceof Error ? err.message : String(err));
    }
  };
  void run();
  const timer = setInterval(() => {
    if (!stopped) void run();
  }, REFRESH_MS);
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}

function banner(message: string): void {
  const node = document.getElementById("banner");
  if (!node) return;
  node.textContent = message;
  node.hidden = message === "";
}

// ---- login -------------------------------------------------------------------------------

const REFUSED = "that API key or admin token was refused";
const ADMIN_TOKEN_FILE = "/var/lib/warren/secrets/admin-token";

function login(reason = ""): undefined {
  root.replaceChildren(
    el("form", { id: "login", class: "card" }, [
      el("h1", {}, ["Warren"]),
      el("p", { class: "muted" }, [
        "Sign in with a team's API key (its sandboxes and templates) or the node's admin token (every team's, the node and the teams: ",
        el("code", {}, [ADMIN_TOKEN_FILE]),
        ").",
      ]),
      el(
        "input",
        {
          id: "api-key",
          type: "password",
          placeholder: "API key or admin token",
          autocomplete: "off",
        },
        [],
      ),
      el("button", { type: "submit" }, ["Sign in"]),
      el("p", { id: "login-error", class: "error" }, [reason]),
    ]),
  );
  const form = document.getElementById("login") as HTMLFormElement;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const secret = (document.getElementById("api-key") as HTMLInputElement).value.trim();
    const failed = (message: string) => {
      (document.getElementById("login-error") as HTMLElement).textContent = message;
    };
    identify(secret).then(
      (found) => {
        if (!found) return failed(REFUSED);
        setCredential(found);
        route();
      },
      (err: unknown) => failed(err instanceof Error ? err.message : String(err)),
    );
  });
  return undefined;
}

function logOut(reason = ""): void {
  setCredential(undefined);
  location.hash = "";
  show(() => login(reason));
}

// ---- layout ------------------------------------------------------------------------------

const VIEWS = [
  ["sandboxes", "Sandboxes"],
  ["forks", "Fork trees"],
  ["templates", "Templates"],
  ["node", "Node"],
] as const;

const isAdmin = () => credential()?.kind === "admin";

function layout(active: string, title: string, ...content: Node[]): HTMLElement {
  const main = el("main", {}, [el("h2", {}, [title]), ...content]);
  const views = isAdmin() ? [...VIEWS, ["teams", "Teams"] as const] : VIEWS;
  root.replaceChildren(
    el("header", {}, [
      el("span", { class: "brand" }, ["Warren"]),
      el(
        "nav",
        {},
        views.map(([view, label]) =>
          el("a", { href: `#/${view}`, class: view === active ? "active" : "" }, [label]),
        ),
      ),
      el("span", { id: "signed-in", class: "muted" }, [
        isAdmin() ? "admin: every team" : "a team's API key",
      ]),
      el("button", { id: "logout", class: "link" }, ["Sign out"]),
    ]),
    el("div", { id: "banner", class: "error", hidden: "" }, []),
    main,
  );
  (document.getElementById("logout") as HTMLElement).onclick = () => logOut();
  return main;
}

function badge(state: string): HTMLElement {
  return el("span", { class: `badge ${state}` }, [state]);
}

// ---- sandboxes ---------------------------------------------------------------------------

/** More than this many rows is past reading; the node view counts them all. */
const MAX_LISTED = 2_000;

/** Running and paused sandboxes, oldest first. */
function listSandboxes(): Promise<{ items: ListedSandbox[]; more: boolean }> {
  return getAll<ListedSandbox>(
    "/v2/sandboxes?state=running,paused&limit=100&order=asc",
    MAX_LISTED,
  );
}

function sandboxesView(): () => void {
  const body = el("tbody", { id: "sandboxes" }, []);
  layout(
    "sandboxes",
    "Sandboxes",
    table(["ID", "Template", "State", "Age", "vCPUs", "Memory", "Metadata"], body),
  );
  return every(async () => {
    const { items: list, more } = await listSandboxes();
    const note = (text: string) =>
      el("tr", {}, [el("td", { colspan: "7", class: "muted" }, [text])]);
    body.replaceChildren(
      ...(list.length === 0
        ? [note("No sandboxes yet.")]
        : list.map((s) =>
            el("tr", { "data-sandbox": s.sandboxID }, [
              el("td", {}, [el("a", { href: `#/sandbox/${s.sandboxID}` }, [s.sandboxID])]),
              el("td", {}, [s.alias ?? s.templateID]),
              el("td", {}, [badge(s.state)]),
              el("td", {}, [since(s.startedAt)]),
              el("td", {}, [String(s.cpuCount)]),
              el("td", {}, [`${s.memoryMB} MiB`]),
              el("td", { class: "muted" }, [
                Object.entries(s.metadata)
                  .map(([k, v]) => `${k}=${v}`)
                  .join(", "),
              ]),
            ]),
          )),
      ...(more ? [note(`The first ${list.length} shown; the node view counts them all.`)] : []),
    );
  });
}

function sandboxView(id: string): () => void {
  const info = el("dl", { class: "info" }, []);
  const charts = el("div", { class: "charts" }, []);
  const logs = el("pre", { id: "logs", class: "logs" }, []);
  const terminalHost = el("div", { id: "terminal", class: "terminal", hidden: "" }, []);
  const actions = el("div", { class: "actions" }, []);
  layout(
    "sandboxes",
    `Sandbox ${id}`,
    actions,
    info,
    el("h3", {}, ["CPU and memory"]),
    charts,
    el("h3", {}, ["Terminal"]),
    terminalHost,
    el("h3", {}, ["Logs"]),
    logs,
  );
  const chart = new MetricCharts(charts);
  let closeTerminal: (() => void) | undefined;
  let state = "";
  const act = (label: string, run: () => Promise<unknown>) => {
    const button = el("button", { "data-action": label.toLowerCase() }, [label]);
    button.onclick = () => {
      run().then(
        () => banner(""),
        (err: unknown) => banner(err instanceof Error ? err.message : String(err)),
      );
    };
    return button;
  };
  const terminalButton = act("Open terminal", async () => {
    if (closeTerminal) return;
    const detail = await get<SandboxDetail>(`/sandboxes/${id}`);
    terminalHost.hidden = false;
    closeTerminal = openTerminal(terminalHost, id, detail.envdAccessToken, (message) =>
      banner(message),
    );
  });
  actions.replaceChildren(
    terminalButton,
    act("Fork", () => call("POST", `/sandboxes/${id}/fork`, { count: 1 })),
    act("Pause", () => call("POST", `/sandboxes/${id}/pause`, {})),
    act("Resume", () => call("POST", `/sandboxes/${id}/connect`, { timeout: 300 })),
    act("Kill", async () => {
      await call("DELETE", `/sandboxes/${id}`);
      location.hash = "#/sandboxes";
    }),
  );
  const started = Math.floor(Date.now() / 1000) - 3_600;
  const stop = every(async () => {
    const [detail, metrics, log] = await Promise.all([
      get<SandboxDetail>(`/sandboxes/${id}`),
      get<Metric[]>(`/sandboxes/${id}/metrics?start=${started}`),
      get<{ logs: LogEntry[] }>(`/v2/sandboxes/${id}/logs?limit=500`),
    ]);
    state = detail.state;
    info.replaceChildren(
      ...[
        ["State", badge(detail.state)],
        ["Template", detail.alias ?? detail.templateID],
        [
          "Started",
          `${new Date(detail.startedAt).toLocaleString()} (${since(detail.startedAt)} ago)`,
        ],
        ["Ends", new Date(detail.endAt).toLocaleString()],
        ["Shape", `${detail.cpuCount} vCPUs, ${detail.memoryMB} MiB`],
      ].flatMap(([k, v]) => [el("dt", {}, [k as string]), el("dd", {}, [v as Node | string])]),
    );
    chart.update(metrics);
    logs.textContent = log.logs
      .map(
        (e) =>
          `${e.timestamp.slice(11, 19)} ${e.level.padEnd(5)} ${(e.fields.source ?? "").padEnd(9)} ${e.message}`,
      )
      .join("\n");
    terminalButton.toggleAttribute("disabled", state !== "running");
  });
  return () => {
    stop();
    chart.destroy();
    closeTerminal?.();
  };
}

// ---- fork trees --------------------------------------------------------------------------

function forksView(): () => void {
  const forest = el("div", { id: "forks", class: "forest" }, []);
  layout(
    "forks",
    "Fork trees",
    el("p", { class: "muted" }, [
      "Who forked from whom: each child under its source, with the capture it came from.",
    ]),
    forest,
  );
  return every(async () => {
    const [lineage, { items: sandboxes }] = await Promise.all([
      get<Lineage[]>("/lineage"),
      listSandboxes(),
    ]);
    const state = new Map(sandboxes.map((s) => [s.sandboxID, s.state]));
    const children = new Map<string, Lineage[]>();
    const known = new Set(lineage.map((l) => l.sandboxId));
    const roots = new Map<string, Lineage>();
    for (const l of lineage) {
      if (!l.parentId) {
        roots.set(l.sandboxId, l);
        continue;
      }
      const siblings = children.get(l.parentId);
      if (siblings) siblings.push(l);
      else children.set(l.parentId, [l]);
      // A parent that is gone still heads its children's tree.
      if (!known.has(l.parentId) && !roots.has(l.parentId)) {
        roots.set(l.parentId, { sandboxId: l.parentId, templateId: l.templateId, via: "template" });
      }
    }
    const tree = (node: Lineage): HTMLElement => {
      const kids = children.get(node.sandboxId) ?? [];
      const gone = !known.has(node.sandboxId);
      return el("li", { "data-node": node.sandboxId }, [
        el("span", { class: "node" }, [
          gone
            ? el("span", { class: "muted" }, [`${node.sandboxId} (gone)`])
            : el("a", { href: `#/sandbox/${node.sandboxId}` }, [node.sandboxId]),
          " ",
          badge(gone ? "gone" : (state.get(node.sandboxId) ?? "?")),
          node.parentId
            ? el("span", { class: "muted" }, [
                ` ${node.via === "fork" ? "forked" : "from a snapshot"} · capture ${node.snapshotId ?? "?"}`,
              ])
            : el("span", { class: "muted" }, [` template ${node.templateId}`]),
        ]),
        ...(kids.length > 0 ? [el("ul", {}, kids.map(tree))] : []),
      ]);
    };
    // Trees with forks first, then lone sandboxes.
    const forks = (l: Lineage) => children.get(l.sandboxId)?.length ?? 0;
    const sorted = [...roots.values()].sort((a, b) => forks(b) - forks(a));
    forest.replaceChildren(
      sorted.length === 0
        ? el("p", { class: "muted" }, ["No sandboxes yet."])
        : el("ul", { class: "tree" }, sorted.map(tree)),
    );
  });
}

// ---- templates ---------------------------------------------------------------------------

function templatesView(): () => void {
  const body = el("tbody", {}, []);
  const buildList = el("ul", { id: "builds" }, []);
  const heading = el("h3", {}, []);
  const log = el("pre", { id: "build-log", class: "logs" }, []);
  layout(
    "templates",
    "Templates",
    table(["ID", "Names", "Status", "Builds", "Shape", "Created"], body),
    heading,
    buildList,
    log,
  );
  const link = (text: string, onclick: () => void) => {
    const button = el("button", { class: "as-link", type: "button" }, [text]);
    button.onclick = onclick;
    return button;
  };
  /** The template whose builds are shown, and the build whose log is (read on from `offset`). */
  let template: string | undefined;
  let build: { id: string; offset: number; done: boolean } | undefined;
  // One refresh at a time, so no log page is read (and appended) twice.
  let busy = false;
  const refresh = async () => {
    if (busy) return;
    busy = true;
    try {
      await render();
    } finally {
      busy = false;
    }
  };
  const render = async () => {
    const templates = await get<TemplateSummary[]>("/templates");
    body.replaceChildren(
      ...templates.map((t) =>
        el("tr", { "data-template": t.templateID }, [
          el("td", {}, [link(t.templateID, () => select(t.templateID))]),
          el("td", {}, [t.names.join(", ")]),
          el("td", {}, [badge(t.buildStatus)]),
          el("td", {}, [String(t.buildCount)]),
          el("td", {}, [`${t.cpuCount} vCPUs, ${t.memoryMB} MiB`]),
          el("td", {}, [`${since(t.createdAt)} ago`]),
        ]),
      ),
    );
    template ??= templates[0]?.templateID;
    if (!template) return;
    const path = `/templates/${encodeURIComponent(template)}`;
    const detail = await get<TemplateDetail>(path);
    heading.textContent = `Builds of ${detail.names.join(", ") || template}`;
    // Newest first; the newest one's log unless another was picked.
    const builds = [...detail.builds].sort(
      (a, b) => Date.parse(b.createdAt) - Date.parse(a.createdAt),
    );
    buildList.replaceChildren(
      ...(builds.length === 0
        ? [el("li", { class: "muted" }, ["None: made from a sandbox's snapshot, not built."])]
        : builds.map((b) =>
            el("li", { "data-build": b.buildID }, [
              link(b.buildID, () => {
                build = { id: b.buildID, offset: 0, done: false };
                log.textContent = "";
                void refresh();
              }),
              " ",
              badge(b.status),
              ` ${since(b.createdAt)} ago`,
            ]),
          )),
    );
    if (!build && builds[0]) build = { id: builds[0].buildID, offset: 0, done: false };
    if (!build || build.done) return;
    const shown = build;
    const status = await get<BuildStatus>(
      `${path}/builds/${encodeURIComponent(shown.id)}/status?logsOffset=${shown.offset}`,
    );
    if (build !== shown) return; // another build was picked meanwhile
    shown.offset += status.logEntries.length;
    log.append(
      ...status.logEntries.map(
        (e) => `${e.timestamp.slice(11, 19)} ${e.level.padEnd(5)} ${e.message}\n`,
      ),
    );
    shown.done = status.status === "ready" || status.status === "error";
  };
  const select = (id: string) => {
    template = id;
    build = undefined;
    log.textContent = "";
    void refresh();
  };
  return every(refresh);
}

const plural = (n: number, noun: string) => `${n} ${noun}${n === 1 ? "" : "s"}`;

// ---- node --------------------------------------------------------------------------------

function nodeView(): () => void {
  const body = el("div", { id: "node", class: "node-view" }, []);
  layout("node", "Node", body);
  const bar = (label: string, used: number, limit: number, unit = "") =>
    el("div", { class: "meter" }, [
      el("span", {}, [`${label}: ${used}${unit} of ${limit}${unit}`]),
      el("div", { class: "bar" }, [
        el("div", { style: `width:${limit > 0 ? Math.min(100, (100 * used) / limit) : 0}%` }, []),
      ]),
    ]);
  return every(async () => {
    const node = await get<NodeView>("/node").catch((err: unknown) => {
      // A team's key sees its own sandboxes, not the node's (403 admin_required).
      if (err instanceof ApiError && err.status === 403) return undefined;
      throw err;
    });
    if (!node) {
      body.replaceChildren(
        el("p", { class: "muted" }, [
          "The node view needs the admin token: sign out and sign in with it (",
          el("code", {}, [ADMIN_TOKEN_FILE]),
          " on the node).",
        ]),
      );
      return;
    }
    const c = node.capacity;
    body.replaceChildren(
      el("p", {}, [`Status ${node.status}, accelerator ${node.accelerator ?? "?"}`]),
      // Admission counts warm VMMs too: a create takes a warm VMM's reservation over.
      bar("VMs admitted (sandboxes and warm VMMs)", c.sandboxes, c.maxSandboxes),
      bar("vCPUs", c.vcpus, c.maxVcpus),
      bar("Guest memory", c.memoryMiB, c.maxMemoryMiB, " MiB"),
      el("h3", {}, ["Sandboxes by state"]),
      el(
        "ul",
        {},
        Object.entries(node.sandboxesByState).map(([s, n]) => el("li", {}, [badge(s), ` ${n}`])),
      ),
      el("h3", {}, ["Warm pools"]),
      el("p", {}, [
        `${plural(node.pool.ready, "VMM")} ready for ${plural(node.pool.templates, "template")} (${node.pool.memoryMiB} MiB of guest memory)`,
      ]),
    );
  });
}

// ---- teams (admin) -----------------------------------------------------------------------

function teamsView(): () => void {
  const body = el("tbody", { id: "teams" }, []);
  layout(
    "teams",
    "Teams",
    el("p", { class: "muted" }, [
      "What each team uses now of its quotas (∞: no limit). ",
      el("code", {}, ["warren team create|ls|rm"]),
      " and ",
      el("code", {}, ["warren key"]),
      " manage them.",
    ]),
    table(
      ["ID", "Name", "Sandboxes", "vCPUs", "Memory", "Disk", "Builds", "Uploads", "Created"],
      body,
    ),
  );
  const of = (used: string, limit: number | undefined, unit = "") =>
    `${used}${unit} of ${limit === undefined ? "∞" : `${limit}${unit}`}`;
  return every(async () => {
    const teams = await get<TeamSummary[]>("/admin/teams");
    body.replaceChildren(
      ...teams.map((t) =>
        el("tr", { "data-team": t.teamID }, [
          el("td", {}, [t.teamID]),
          el("td", {}, [t.name]),
          el("td", {}, [of(String(t.usage.sandboxes), t.limits.maxSandboxes)]),
          el("td", {}, [of(String(t.usage.vcpus), t.limits.maxVcpus)]),
          el("td", {}, [of(String(t.usage.memoryMiB), t.limits.maxMemoryMiB, " MiB")]),
          el("td", {}, [of(gibibytes(t.usage.diskMiB), t.limits.maxDiskGiB, " GiB")]),
          el("td", {}, [t.limits.maxBuilds === undefined ? "∞" : String(t.limits.maxBuilds)]),
          el("td", {}, [
            t.limits.maxUploadBytes === undefined
              ? "∞"
              : `${Math.floor(t.limits.maxUploadBytes / 1024 / 1024)} MiB`,
          ]),
          el("td", {}, [`${since(t.createdAt)} ago`]),
        ]),
      ),
    );
  });
}

/** MiB as GiB, to a tenth where it is not whole. */
function gibibytes(mib: number): string {
  const gib = mib / 1024;
  return Number.isInteger(gib) ? String(gib) : gib.toFixed(1);
}

// ---- routing -----------------------------------------------------------------------------

/** The view the URL names (a sign-in first when no key is held). */
function viewFor(hash: string): () => (() => void) | undefined {
  if (!credential()) return () => login();
  const [view, arg] = hash.replace(/^#\/?/, "").split("/");
  if (view === "sandbox") return () => sandboxView(idFromUrl(arg ?? ""));
  const views: Record<string, () => () => void> = {
    forks: forksView,
    templates: templatesView,
    node: nodeView,
    ...(isAdmin() && { teams: teamsView }),
  };
  return views[view ?? ""] ?? sandboxesView;
}

function route(): void {
  show(viewFor(location.hash));
}

window.addEventListener("hashchange", route);
route();
