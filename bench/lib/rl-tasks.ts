// What bench:rl's workloads run inside a sandbox, the same for Warren and the peer: reward
// samples (a short Python function and its tests), a small repository with a test suite, the
// 16 edits a GRPO group tries on it, and an agent's turns. Each carries what it should give,
// so that a backend answering wrongly counts as an error, not as a fast run.

/** One reward sample: Python defining `solve` and asserting on it; fails when `reward` is 0. */
export interface RewardSample {
  readonly code: string;
  readonly reward: 0 | 1;
}

const SOLUTIONS: readonly { body: string; right: boolean }[] = [
  { body: "return sorted(xs, reverse=True)[:3]", right: true },
  { body: "return sorted(xs)[-3:][::-1]", right: true },
  { body: "return sorted(xs)[:3]", right: false },
  { body: "return list(reversed(sorted(set(xs))))[:3]", right: false },
];

/** Sample `k`: a top-3 function (right or wrong by k) and tests that check it. */
export function rewardSample(k: number): RewardSample {
  const solution = SOLUTIONS[k % SOLUTIONS.length] as { body: string; right: boolean };
  const code = [
    "def solve(xs):",
    `    ${solution.body}`,
    `assert solve([3, 1, 2, 5]) == [5, 3, 2], 'sample ${k}'`,
    "assert solve([4, 4, 1, 0]) == [4, 4, 1]",
    `assert solve(list(range(${100 + k}))) == [${99 + k}, ${98 + k}, ${97 + k}]`,
    "print('reward', 1)",
  ].join("\n");
  return { code, reward: solution.right ? 1 : 0 };
}

/** Where the repository lives in a sandbox (the `user` account's home). */
export const REPO_DIR = "/home/user/repo";

/** The repository's files: a statistics module whose `median` is wrong for even lengths. */
export const REPO_FILES: Record<string, string> = {
  "stats.py": [
    "def mean(xs):",
    "    return sum(xs) / len(xs)",
    "",
    "",
    "def median(xs):",
    "    s = sorted(xs)",
    "    n = len(s)",
    "    return s[n // 2]  # MEDIAN",
    "",
    "",
    "def mode(xs):",
    "    return max(set(xs), key=xs.count)",
    "",
  ].join("\n"),
  "test_stats.py": [
    "import unittest",
    "",
    "from stats import mean, median, mode",
    "",
    "",
    "class StatsTest(unittest.TestCase):",
    "    def test_mean(self):",
    "        self.assertEqual(mean([1, 2, 3, 4]), 2.5)",
    "",
    "    def test_median_odd(self):",
    "        self.assertEqual(median([3, 1, 2]), 2)",
    "",
    "    def test_median_even(self):",
    "        self.assertEqual(median([4, 1, 3, 2]), 2.5)",
    "",
    "    def test_mode(self):",
    "        self.assertEqual(mode([1, 2, 2, 3]), 2)",
    "",
    "",
    'if __name__ == "__main__":',
    "    unittest.main()",
    "",
  ].join("\n"),
  "README.md": "# stats\n\nRun the tests: `python3 -m unittest -q`.\n",
};

/** A shell script making the repository (files, a git history) at REPO_DIR. */
export function repoSetupScript(): string {
  const files = Object.entries(REPO_FILES).map(
    ([name, content]) =>
      `echo ${Buffer.from(content).toString("base64")} | base64 -d > ${REPO_DIR}/${name}`,
  );
  return [
    `mkdir -p ${REPO_DIR}`,
    ...files,
    `cd ${REPO_DIR}`,
    "git init -q",
    "git add -A",
    "git -c user.email=rl@warren.test -c user.name=rl commit -qm init",
  ].join(" && ");
}

/** Runs the repository's tests: exit code 0 is reward 1. */
export const RUN_TESTS = `cd ${REPO_DIR} && python3 -m unittest -q 2>&1`;

const MEDIAN_EDITS: readonly { line: string; right: boolean }[] = [
  { line: "return (s[(n - 1) // 2] + s[n // 2]) / 2", right: true },
  { line: "return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2", right: true },
  { line: "return s[n // 2 - 1]", right: false },
  { line: "return s[0]", right: false },
];

/** Edit `i` of a group: a one-line change to `median`, and whether the tests then pass. */
export function groupEdit(i: number): { script: string; reward: 0 | 1 } {
  const edit = MEDIAN_EDITS[i % MEDIAN_EDITS.length] as { line: string; right: boolean };
  const line = Buffer.from(`    ${edit.line}  # MEDIAN`).toString("base64");
  const script = `cd ${REPO_DIR} && line=$(echo ${line} | base64 -d) && awk -v l="$line" '/# MEDIAN/ {print l; next} {print}' stats.py > stats.tmp && mv stats.tmp stats.py`;
  return { script, reward: edit.right ? 1 : 0 };
}

/** An agent's turn `t` (1-based): edit, run the tests, or read files, in turn. */
export function agentTurn(t: number): { script: string; kind: "edit" | "test" | "read" } {
  switch (t % 3) {
    case 0:
      return {
        kind: "edit",
        script: `cd ${REPO_DIR} && mkdir -p notes && echo "turn ${t}" > notes/turn-${t}.txt && sed -i 's/^# stats.*/# stats (turn ${t})/' README.md`,
      };
    case 1:
      return { kind: "test", script: RUN_TESTS };
    default:
      return {
        kind: "read",
        script: `cd ${REPO_DIR} && cat stats.py README.md && ls notes 2>/dev/null | wc -l && git status --short`,
      };
  }
}
