import type { SandboxSpan } from "../orchestrator/index.js";

/** E2B's TeamMetric: sandboxes running at the moment, and starts per second in the step before it. */
export interface TeamMetricPoint {
  readonly timestamp: string;
  readonly timestampUnix: number;
  readonly concurrentSandboxes: number;
  readonly sandboxStartRate: number;
}

/** Points of a window: at most this many, at least a second apart. */
const MAX_POINTS = 200;

/**
 * The team's concurrency and start rate over [start, end] (seconds since the epoch), sampled
 * evenly from its sandboxes' lives: at each point, the sandboxes started and not yet ended,
 * and the starts since the point before, per second.
 */
export function teamMetrics(
  spans: readonly SandboxSpan[],
  startS: number,
  endS: number,
): TeamMetricPoint[] {
  const stepS = Math.max(1, Math.ceil((endS - startS) / MAX_POINTS));
  const points: TeamMetricPoint[] = [];
  for (let t = startS; t <= endS; t += stepS) {
    const at = t * 1000;
    let concurrent = 0;
    let started = 0;
    for (const span of spans) {
      const from = span.startedAt.getTime();
      const to = span.endedAt?.getTime() ?? Number.POSITIVE_INFINITY;
      if (from <= at && at < to) concurrent += 1;
      if (from > at - stepS * 1000 && from <= at) started += 1;
    }
    points.push({
      timestamp: new Date(at).toISOString(),
      timestampUnix: t,
      concurrentSandboxes: concurrent,
      sandboxStartRate: started / stepS,
    });
  }
  return points;
}

/** The point of the window where `metric` was highest (the first such), E2B's MaxTeamMetric. */
export function maxTeamMetric(
  points: readonly TeamMetricPoint[],
  metric: "concurrentSandboxes" | "sandboxStartRate",
): { timestamp: string; timestampUnix: number; value: number } {
  let best = points[0];
  for (const point of points) if (best === undefined || point[metric] > best[metric]) best = point;
  return {
    timestamp: best?.timestamp ?? new Date().toISOString(),
    timestampUnix: best?.timestampUnix ?? Math.floor(Date.now() / 1000),
    value: best?.[metric] ?? 0,
  };
}
