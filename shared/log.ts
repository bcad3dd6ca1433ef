// One pino logger for the whole process; modules take child loggers that carry their own fields
// (component, cluster, job) so every line can be filtered by what it is about.
import { type Logger, pino } from "pino";

export type { Logger };

export interface LogOptions {
  level?: string;
  /** Human-readable output for the demo and local tools; JSON otherwise. */
  pretty?: boolean;
}

export function createLogger(options: LogOptions = {}): Logger {
  const level = options.level ?? "info";
  if (options.pretty) {
    return pino({
      level,
      transport: { target: "pino-pretty", options: { colorize: true, ignore: "pid,hostname" } },
    });
  }
  return pino({
    level,
    redact: { paths: ["*.token", "*.password", "*.secretAccessKey"], censor: "[redacted]" },
  });
}

/** A logger that drops everything: for unit tests that do not look at logs. */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
