// The quick look's record and comparison (shared/look.ts), without a cluster: what a steady full
// look leaves, and which answers of one member call for a full look.
import t from "tap";
import type { EndpointStatus } from "../shared/etcd-members.ts";
import { difference, lookRecord, parseLookRecord } from "../shared/look.ts";

const MiB = 1024 * 1024;
const member = (endpoint: string, id: string, extra: Partial<EndpointStatus> = {}): EndpointStatus => ({
  endpoint,
  ok: true,
  memberId: id,
  leaderId: "1",
  raftTerm: "4",
  dbSize: 20 * MiB,
  dbSizeInUse: 12 * MiB,
  ...extra,
});
const steady = [member("http://a:2379", "1"), member("http://b:2379", "2"), member("http://c:2379", "3")];

t.test("a steady full look leaves a record due one interval later", async (t) => {
  const record = lookRecord(steady, { nowMs: 1_000, fullLookIntervalMs: 300_000 });
  t.ok(record, "a record");
  t.equal(record?.dueMs, 301_000);
  t.equal(record?.leaderId, "1");
  t.equal(record?.raftTerm, "4");
  t.equal(record?.members.length, 3, "every member's database");
  t.same(parseLookRecord(JSON.stringify(record)), record, "read back from Redis as written");
});

t.test("no record when quick looks could miss something", async (t) => {
  const options = { nowMs: 0, fullLookIntervalMs: 1_000 };
  t.equal(lookRecord([], options), undefined, "no member answered");
  t.equal(
    lookRecord([...steady.slice(0, 2), { endpoint: "http://c:2379", ok: false, error: "refused" }], options),
    undefined,
    "a member did not answer",
  );
  t.equal(
    lookRecord(
      [member("http://a:2379", "1", { errors: ["memberID:1 alarm:NOSPACE"] }), ...steady.slice(1)],
      options,
    ),
    undefined,
    "an alarm",
  );
  t.equal(
    lookRecord(
      steady.map((s) => ({ ...s, leaderId: "0" })),
      options,
    ),
    undefined,
    "no leader",
  );
});

t.test("one member's answer against the record", async (t) => {
  const record = lookRecord(steady, { nowMs: 0, fullLookIntervalMs: 1_000 });
  if (!record) throw new Error("no record");
  t.equal(difference(record, member("http://b:2379", "2")), undefined, "the same answer: nothing differs");
  t.equal(
    difference(record, member("http://b:2379", "2", { dbSize: 21 * MiB, dbSizeInUse: 12.5 * MiB })),
    undefined,
    "a little growth is no news",
  );
  t.match(
    difference(record, { endpoint: "http://b:2379", ok: false, error: "connection refused" }),
    /did not answer: connection refused/,
  );
  t.match(difference(record, member("http://b:2379", "2", { errors: ["alarm:NOSPACE"] })), /NOSPACE/);
  t.match(difference(record, member("http://b:2379", "2", { leaderId: "3" })), /leader or term changed/);
  t.match(difference(record, member("http://b:2379", "2", { raftTerm: "5" })), /leader or term changed/);
  t.match(
    difference(record, member("http://b:2379", "2", { dbSize: 30 * MiB })),
    /database changed size/,
    "the file grew",
  );
  t.match(
    difference(record, member("http://b:2379", "2", { dbSizeInUse: 2 * MiB })),
    /database changed size/,
    "pages were freed (a defragmentation may be due)",
  );
  t.match(difference(record, member("http://d:2379", "4")), /not in the record/);
});

t.test("a record that is not one is ignored", async (t) => {
  t.equal(parseLookRecord(undefined), undefined);
  t.equal(parseLookRecord("not json"), undefined);
  t.equal(parseLookRecord('{"dueMs":1}'), undefined);
  t.equal(parseLookRecord('{"dueMs":1,"leaderId":"1","raftTerm":"2","members":[]}'), undefined, "no member");
});
