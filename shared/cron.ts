// Cron schedules in UTC (five fields), on cron-parser (the parser BullMQ uses for its repeats).
import { CronExpressionParser } from "cron-parser";

function parse(schedule: string, now: Date) {
  return CronExpressionParser.parse(schedule, { currentDate: now, tz: "UTC", strict: false });
}

/** Why `schedule` is not a five-field cron schedule, or undefined when it is one. */
export function cronProblem(schedule: string): string | undefined {
  if (schedule.trim().split(/\s+/).length !== 5) return "it needs exactly five fields";
  try {
    parse(schedule, new Date());
    return undefined;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

/** The latest time of `schedule` at or before `nowMs`. */
export function previousCronTime(schedule: string, nowMs: number): number {
  return parse(schedule, new Date(nowMs + 1))
    .prev()
    .getTime();
}
