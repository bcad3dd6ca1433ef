// Reads serverless.yml and compares it with the code, for tests/serverless.test.ts. Every check
// returns the problems it found as sentences (empty: they agree), so the test can also prove that
// each check catches a broken copy of the file.
//
// What "the code" is, found generically so new functions are checked without editing this file:
// - handlers: `handler: dir/module.export` is imported from dir/module.ts;
// - queues and jobs: the `*_QUEUE` and `*_JOB` constants exported by shared/queue.ts;
// - a queue is consumed when a file under infra/ (not infra/local) constructs `new Worker(<its constant>`;
// - a job is live when its constant is used as a value (not only in a type) in functions/, shared/ or
//   infra/: enqueued, scheduled or compared against `job.name`; it belongs to the queue declared
//   above it in shared/queue.ts (the file declares each queue, then its jobs);
// - schedules are the `upsertJobScheduler(...)` calls under infra/ and the job `name:` each one adds;
// - a schedule's `every` is a setting loadConfig reads (it rejects a bad value naming the variable);
// - HTTP routes are what the HTTP server registers (see httpRoutesOf).

import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { parse } from "yaml";
import { EtcdBackupSpecSchema } from "../../shared/api/etcd-backup.ts";
import { loadConfig } from "../../shared/config.ts";
import * as queueModule from "../../shared/queue.ts";

export const ROOT = new URL("../../", import.meta.url).pathname;

export interface QueueEvent {
  kind: "queue";
  queue: string;
  job: string;
}
export interface ScheduleEvent {
  kind: "schedule";
  queue: string;
  job: string;
  every: string;
}
export interface HttpEvent {
  kind: "http";
  method: string;
  path: string;
}
export type FunctionEvent = QueueEvent | ScheduleEvent | HttpEvent;

export interface FunctionEntry {
  name: string;
  handler: string;
  role: string | undefined;
  events: FunctionEvent[];
}

function record(value: unknown, at: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new Error(`${at} must be a mapping, got ${JSON.stringify(value)}`);
  }
  return value as Record<string, unknown>;
}

function text(value: unknown, at: string): string {
  if (typeof value !== "string" || value === "") throw new Error(`${at} must be a non-empty string`);
  return value;
}

function event(value: unknown, at: string): FunctionEvent {
  const entry = record(value, at);
  const kinds = Object.keys(entry);
  const [kind] = kinds;
  if (kinds.length !== 1 || kind === undefined) throw new Error(`${at} must have exactly one event kind`);
  const body = record(entry[kind], `${at}.${kind}`);
  switch (kind) {
    case "queue":
      return { kind, queue: text(body.name, `${at}.queue.name`), job: text(body.job, `${at}.queue.job`) };
    case "schedule":
      return {
        kind,
        queue: text(body.queue, `${at}.schedule.queue`),
        job: text(body.job, `${at}.schedule.job`),
        every: text(body.every, `${at}.schedule.every`),
      };
    case "http":
      return {
        kind,
        method: text(body.method, `${at}.http.method`).toUpperCase(),
        path: text(body.path, `${at}.http.path`),
      };
    default:
      throw new Error(`${at}: unknown event kind "${kind}" (queue, schedule or http)`);
  }
}

/** The functions of a serverless.yml text; throws with the path of the first malformed entry. */
export function parseServerless(source: string): FunctionEntry[] {
  const doc = record(parse(source), "serverless.yml");
  const functions = record(doc.functions, "functions");
  return Object.entries(functions).map(([name, value]) => {
    const fn = record(value, `functions.${name}`);
    const events = fn.events;
    if (!Array.isArray(events) || events.length === 0) {
      throw new Error(`functions.${name}.events must list at least one trigger`);
    }
    return {
      name,
      handler: text(fn.handler, `functions.${name}.handler`),
      role: fn.role === undefined ? undefined : text(fn.role, `functions.${name}.role`),
      events: events.map((e, i) => event(e, `functions.${name}.events[${i}]`)),
    };
  });
}

export function readServerless(): FunctionEntry[] {
  return parseServerless(readFileSync(join(ROOT, "serverless.yml"), "utf8"));
}

// ---------------------------------------------------------------------------------------------------------
// Handlers

/** "functions/reconcile.reconcile" → module functions/reconcile.ts, export reconcile. */
export function splitHandler(handler: string): { module: string; exportName: string } | undefined {
  const match = /^([\w./-]+)\.(\w+)$/.exec(handler);
  if (!match?.[1] || !match[2]) return undefined;
  return { module: `${match[1]}.ts`, exportName: match[2] };
}

export async function handlerProblems(entries: FunctionEntry[]): Promise<Findings> {
  const problems: string[] = [];
  for (const entry of entries) {
    const parts = splitHandler(entry.handler);
    if (!parts) {
      problems.push(`${entry.name}: handler "${entry.handler}" is not of the form path/module.export`);
      continue;
    }
    const path = join(ROOT, parts.module);
    if (!existsSync(path)) {
      problems.push(`${entry.name}: handler module ${parts.module} does not exist`);
      continue;
    }
    const module: Record<string, unknown> = await import(path);
    if (typeof module[parts.exportName] !== "function") {
      problems.push(`${entry.name}: ${parts.module} exports no function "${parts.exportName}"`);
    }
  }
  return { problems };
}

// ---------------------------------------------------------------------------------------------------------
// Queues, jobs and schedules

/** The exported constants of shared/queue.ts whose names end in `suffix`, name → value. */
function queueConstants(suffix: string): Map<string, string> {
  const found = new Map<string, string>();
  for (const [name, value] of Object.entries(queueModule)) {
    if (name.endsWith(suffix) && typeof value === "string") found.set(name, value);
  }
  return found;
}

export const QUEUES = queueConstants("_QUEUE");
export const JOBS = queueConstants("_JOB");

/** Job value → the value of the queue declared before it in shared/queue.ts. */
export function jobQueues(): Map<string, string> {
  const source = readFileSync(join(ROOT, "shared/queue.ts"), "utf8");
  const owners = new Map<string, string>();
  let queue: string | undefined;
  for (const match of source.matchAll(/^export const (\w+_(?:QUEUE|JOB))\b/gm)) {
    const name = match[1] ?? "";
    if (name.endsWith("_QUEUE")) queue = QUEUES.get(name);
    else if (queue !== undefined) owners.set(JOBS.get(name) ?? "", queue);
  }
  return owners;
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) {
      if (relative(ROOT, path) !== join("infra", "local")) out.push(...sourceFiles(path));
    } else if (entry.endsWith(".ts")) out.push(path);
  }
  return out;
}

/** Sources of the operator itself, without comments (a name in a comment uses nothing). */
export function operatorSources(): { path: string; code: string }[] {
  return ["functions", "shared", "infra"]
    .flatMap((dir) => sourceFiles(join(ROOT, dir)))
    .map((path) => ({
      path: relative(ROOT, path),
      code: readFileSync(path, "utf8")
        .replace(/\/\*[\s\S]*?\*\//g, "")
        .replace(/(^|[^:"'`])\/\/.*$/gm, "$1"),
    }));
}

/** Queue values consumed by a BullMQ Worker somewhere under infra/. */
export function consumedQueues(sources = operatorSources()): Set<string> {
  const consumed = new Set<string>();
  for (const { path, code } of sources) {
    if (!path.startsWith("infra/")) continue;
    for (const match of code.matchAll(/new Worker\(\s*([A-Z_]+)/g)) {
      const value = QUEUES.get(match[1] ?? "");
      if (value !== undefined) consumed.add(value);
    }
  }
  return consumed;
}

/** Job values whose constant the operator uses as a value (not only as `typeof X` or its declaration). */
export function liveJobs(sources = operatorSources()): Set<string> {
  const live = new Set<string>();
  for (const [name, value] of JOBS) {
    const uses = new RegExp(`(?<!typeof\\s+)(?<!export const\\s+)\\b${name}\\b`);
    if (sources.some(({ code }) => uses.test(code))) live.add(value);
  }
  return live;
}

/** Job values that an `upsertJobScheduler(...)` call under infra/ adds, with the queue constant it is called on. */
export function scheduledJobs(sources = operatorSources()): Set<string> {
  const scheduled = new Set<string>();
  for (const { path, code } of sources) {
    if (!path.startsWith("infra/")) continue;
    for (const match of code.matchAll(/upsertJobScheduler\(([\s\S]{0,600}?)\)\s*;/g)) {
      for (const name of (match[1] ?? "").matchAll(/\bname:\s*([A-Z_]+)/g)) {
        const value = JOBS.get(name[1] ?? "");
        if (value !== undefined) scheduled.add(value);
      }
    }
  }
  return scheduled;
}

/**
 * A per-object schedule: `EtcdBackup.spec.<path>` naming an integer field of the EtcdBackup schema
 * (each EtcdBackup gets its own job scheduler with that interval).
 */
export function isScheduleField(every: string): boolean {
  const match = /^EtcdBackup\.spec\.(.+)$/.exec(every);
  if (!match) return false;
  let schema: unknown = EtcdBackupSpecSchema;
  for (const key of (match[1] ?? "").split(".")) {
    const properties = (schema as { properties?: Record<string, unknown> }).properties;
    schema = properties?.[key];
    if (schema === undefined) return false;
  }
  return (schema as { type?: unknown }).type === "integer";
}

/** A config variable is real when loadConfig rejects a nonsense value for it by name. */
export function isConfigVariable(name: string): boolean {
  try {
    loadConfig({ [name]: "not-a-valid-value-for-anything" });
    return false;
  } catch (error) {
    return error instanceof Error && error.message.includes(name);
  }
}

export interface Findings {
  /** Disagreements: the test fails on each. */
  problems: string[];
}

export function queueProblems(
  entries: FunctionEntry[],
  code: { consumed: Set<string>; live: Set<string>; scheduled: Set<string> },
): Findings {
  const problems: string[] = [];
  const owners = jobQueues();
  const queueValues = new Set(QUEUES.values());
  const jobValues = new Set(JOBS.values());
  const listedJobs = new Set<string>();
  const listedSchedules = new Set<string>();
  for (const entry of entries) {
    for (const e of entry.events) {
      if (e.kind === "http") continue;
      const what = `${entry.name}: ${e.kind} ${e.queue}/${e.job}`;
      if (!queueValues.has(e.queue)) {
        problems.push(
          `${what}: no queue "${e.queue}" in shared/queue.ts (have ${[...queueValues].join(", ")})`,
        );
      } else if (!code.consumed.has(e.queue)) {
        problems.push(
          `${what}: no worker host consumes queue "${e.queue}" (no \`new Worker(\` for it in infra/)`,
        );
      }
      if (!jobValues.has(e.job)) {
        problems.push(`${what}: no job "${e.job}" in shared/queue.ts (have ${[...jobValues].join(", ")})`);
      } else if (owners.get(e.job) !== e.queue) {
        problems.push(`${what}: job "${e.job}" belongs to queue "${owners.get(e.job)}" in shared/queue.ts`);
      }
      if (e.kind === "queue") listedJobs.add(e.job);
      if (e.kind === "schedule") {
        listedSchedules.add(e.job);
        if (!code.scheduled.has(e.job)) {
          problems.push(`${what}: no upsertJobScheduler in infra/ adds job "${e.job}"`);
        }
        if (!isConfigVariable(e.every) && !isScheduleField(e.every)) {
          problems.push(`${what}: every "${e.every}" is not a setting loadConfig reads`);
        }
      }
    }
  }
  for (const job of code.live) {
    if (listedJobs.has(job)) continue;
    problems.push(`the code runs job "${job}" but no function lists it as a queue event`);
  }
  for (const job of listedJobs) {
    if (!code.live.has(job))
      problems.push(`job "${job}" is listed but nothing in the code enqueues or handles it`);
  }
  for (const job of code.scheduled) {
    if (!listedSchedules.has(job))
      problems.push(`the code schedules job "${job}" but no function lists the schedule`);
  }
  return { problems };
}

// ---------------------------------------------------------------------------------------------------------
// HTTP routes

export interface Route {
  method: string;
  path: string;
}

/**
 * The routes of a ready fastify app, from its OpenAPI document (@fastify/swagger documents every
 * route that has a schema, which is every route of the operator's server). Paths come back in
 * fastify's form (`/v1/namespaces/:ns`), methods upper-case; HEAD (added by fastify for each GET) is
 * left out.
 */
export function httpRoutesOf(app: object): Route[] {
  const swagger: unknown = "swagger" in app ? app.swagger : undefined;
  if (typeof swagger !== "function") {
    throw new Error("the HTTP server has no @fastify/swagger document to read its routes from");
  }
  const doc = record(swagger.call(app), "OpenAPI document");
  const routes: Route[] = [];
  for (const [path, operations] of Object.entries(record(doc.paths ?? {}, "paths"))) {
    for (const method of Object.keys(record(operations, path))) {
      if (!/^(get|put|post|delete|options|patch|trace)$/.test(method)) continue;
      routes.push({ method: method.toUpperCase(), path: path.replace(/\{(\w+)\}/g, ":$1") });
    }
  }
  return routes.sort((a, b) => `${a.path} ${a.method}`.localeCompare(`${b.path} ${b.method}`));
}

export function httpProblems(entries: FunctionEntry[], routes: Route[]): string[] {
  const key = (r: Route) => `${r.method} ${r.path}`;
  const real = new Set(routes.map(key));
  const listed = new Set<string>();
  const problems: string[] = [];
  for (const entry of entries) {
    for (const e of entry.events) {
      if (e.kind !== "http") continue;
      listed.add(key(e));
      if (!real.has(key(e))) problems.push(`${entry.name}: http ${key(e)} is not a route of the HTTP server`);
    }
  }
  for (const route of real) {
    if (!listed.has(route)) problems.push(`the HTTP server serves ${route} but no function lists it`);
  }
  return problems;
}
