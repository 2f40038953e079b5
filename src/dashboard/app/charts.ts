import uPlot from "uplot";
import type { Metric } from "./api.js";
import { TIME_STEPS, timeLabels } from "./time-axis.js";

/** CPU % and memory (MiB) of a sandbox over time, one small chart each. */
export class MetricCharts {
  readonly #cpu: uPlot;
  readonly #memory: uPlot;

  constructor(host: HTMLElement) {
    const chart = (title: string, label: string, color: string, max?: number) =>
      new uPlot(
        {
          title,
          width: Math.max(320, Math.min(560, host.clientWidth / 2 - 24)),
          height: 160,
          scales: { x: { time: true }, y: max === undefined ? {} : { range: [0, max] } },
          series: [{}, { label, stroke: color, fill: `${color}22`, width: 2 }],
          axes: [{ incrs: TIME_STEPS, values: (_u, splits) => timeLabels(splits) }, { size: 50 }],
        },
        [[], []],
        host,
      );
    this.#cpu = chart("CPU", "% used", "#4f7cff", 100);
    this.#memory = chart("Memory", "MiB used", "#2bb673");
  }

  update(metrics: readonly Metric[]): void {
    const t = metrics.map((m) => m.timestampUnix);
    this.#cpu.setData([t, metrics.map((m) => m.cpuUsedPct)]);
    this.#memory.setData([t, metrics.map((m) => Math.round(m.memUsed / 1024 / 1024))]);
  }

  destroy(): void {
    this.#cpu.destroy();
    this.#memory.destroy();
  }
}
