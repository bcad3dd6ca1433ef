// EtcdBackup routes: read a backup's state and take a backup now. The trigger only queues the job
// (one per EtcdBackup at a time, shared/queue.ts requestBackupJob); the backup worker does the work
// and writes the EtcdBackup's status.
import type { FastifyInstance } from "fastify";
import { BACKUP_PLURAL } from "../../../shared/api/etcd-backup.ts";
import { GROUP } from "../../../shared/api/etcd-cluster.ts";
import { BACKUP_JOB, backupJobId, requestBackupJob } from "../../../shared/queue.ts";
import { reviewEtcdBackup } from "../admission/backup-storage.ts";
import type { AuthHooks } from "../auth.ts";
import type { HttpDeps } from "../deps.ts";
import { HttpError } from "../errors.ts";
import { Accepted, BackupState, ErrorResponse, ObjectParams, TriggerBody, withErrors } from "../schemas.ts";
import { emptyBodyAsObject, findBackup, guarded, jobState } from "./objects.ts";

export const BACKUP_PATH = "/v1/namespaces/:ns/etcdbackups/:name";

export function backupRoutes(app: FastifyInstance, deps: HttpDeps, auth: AuthHooks): void {
  const { kube, config } = deps;

  app.get<{ Params: ObjectParams }>(
    BACKUP_PATH,
    {
      schema: {
        summary: "Read an EtcdBackup's state",
        description: "Its spec and status and the state of its backup job. Needs `get` on the EtcdBackup.",
        tags: ["etcdbackups"],
        params: ObjectParams,
        response: withErrors({ 200: BackupState }),
      },
      preHandler: auth.require((request) => {
        const { ns, name } = request.params as ObjectParams;
        return { verb: "get", group: GROUP, resource: BACKUP_PLURAL, namespace: ns, name };
      }),
    },
    async (request) => {
      const { ns, name } = request.params;
      const backup = await findBackup(kube, config, ns, name);
      const state: BackupState = {
        namespace: ns,
        name,
        spec: { ...backup.spec },
        status: { ...(backup.status ?? {}) },
        queue: { backup: await jobState(deps.backupQueue, backupJobId(BACKUP_JOB, ns, name)) },
      };
      return state;
    },
  );

  app.post<{ Params: ObjectParams; Body: TriggerBody | undefined }>(
    `${BACKUP_PATH}/backup`,
    {
      bodyLimit: 4096,
      preValidation: emptyBodyAsObject,
      schema: {
        summary: "Take a backup now",
        description:
          "Queues one backup of the EtcdBackup's cluster to its storage. One job per EtcdBackup at a time: " +
          "while one waits or runs, no second is added (queued: false). Needs `update` on the EtcdBackup. " +
          "422 when the EtcdBackup could never run (e.g. a storage type this operator does not implement).",
        tags: ["etcdbackups"],
        params: ObjectParams,
        body: TriggerBody,
        response: withErrors({ 202: Accepted, 422: ErrorResponse }),
      },
      preHandler: auth.require((request) => {
        const { ns, name } = request.params as ObjectParams;
        return { verb: "update", group: GROUP, resource: BACKUP_PLURAL, namespace: ns, name };
      }),
    },
    async (request, reply) => {
      const { ns, name } = request.params;
      const backup = await findBackup(kube, config, ns, name);
      // The webhook refuses such objects, but it may not have been installed when this one was made.
      const review = reviewEtcdBackup({ operation: "CREATE", object: backup });
      if (!review.allowed) {
        throw new HttpError(422, "Invalid", `EtcdBackup ${ns}/${name} cannot be taken: ${review.message}`);
      }
      const user = request.identity?.username ?? "unknown";
      // The payload's reason is the one the backup worker knows ("manual"); who asked goes to the log.
      const { jobId, queued } = await guarded(`queue a backup of ${ns}/${name}`, () =>
        requestBackupJob(deps.backupQueue, BACKUP_JOB, ns, name, "manual"),
      );
      deps.log.info(
        { backup: `${ns}/${name}`, user, note: request.body?.reason, queued },
        "backup requested over HTTP",
      );
      const accepted: Accepted = {
        accepted: true,
        jobId,
        queued,
        message: queued
          ? `backup ${ns}/${name} requested`
          : `a backup of ${ns}/${name} is already waiting or running; no second one was added`,
      };
      return reply.code(202).send(accepted);
    },
  );
}
