/**
 * The x axis of the dashboard's charts: ticks on whole seconds and up (left to itself, uPlot
 * steps a short span in fractions of a second and labels them ":48.500"), each labelled as
 * a time of day.
 */
export const TIME_STEPS = [
  1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
];

/** Tick values (seconds since the epoch) as local times of day, `HH:MM:SS`. */
export function timeLabels(splits: readonly number[]): string[] {
  const two = (n: number) => String(n).padStart(2, "0");
  return splits.map((seconds) => {
    const at = new Date(seconds * 1000);
    return `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}`;
  });
}
