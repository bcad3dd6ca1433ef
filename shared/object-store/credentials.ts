// Credentials come only from Secrets, in the layout coreos documented: for S3 the AWS CLI's
// `credentials` and `config` files (profile "default"), for OSS the keys accessKeyID and
// accessKeySecret, for ABS storage-account, storage-key (and storage-endpoint), for GCS a service
// account key credentials.json or an access-token. Values are never logged or put into messages;
// only key names are.
import { parse as parseIni } from "ini";
import { ObjectStoreError } from "./types.ts";

export interface S3Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  /** From the config file's default profile; undefined leaves the SDK default. */
  region?: string;
}

export interface OssCredentials {
  accessKeyId: string;
  accessKeySecret: string;
}

function section(ini: Record<string, unknown>, ...names: string[]): Record<string, unknown> {
  for (const name of names) {
    const found = ini[name];
    if (found && typeof found === "object") return found as Record<string, unknown>;
  }
  return {};
}

function text(value: unknown): string | undefined {
  return typeof value === "string" && value.trim() !== "" ? value.trim() : undefined;
}

export function s3CredentialsFromSecret(secretName: string, data: Record<string, string>): S3Credentials {
  const file = data.credentials;
  if (file === undefined) {
    throw new ObjectStoreError(
      "InvalidCredentials",
      `secret "${secretName}" has no key "credentials" (it needs the AWS files "credentials" and "config"; found keys: ${Object.keys(data).join(", ") || "none"})`,
    );
  }
  const profile = section(parseIni(file), "default");
  const accessKeyId = text(profile.aws_access_key_id);
  const secretAccessKey = text(profile.aws_secret_access_key);
  if (!accessKeyId || !secretAccessKey) {
    throw new ObjectStoreError(
      "InvalidCredentials",
      `secret "${secretName}": the [default] profile of "credentials" needs aws_access_key_id and aws_secret_access_key`,
    );
  }
  const config = data.config ? section(parseIni(data.config), "default", "profile default") : {};
  return {
    accessKeyId,
    secretAccessKey,
    sessionToken: text(profile.aws_session_token),
    region: text(config.region),
  };
}

export function ossCredentialsFromSecret(secretName: string, data: Record<string, string>): OssCredentials {
  const accessKeyId = text(data.accessKeyID);
  const accessKeySecret = text(data.accessKeySecret);
  if (!accessKeyId || !accessKeySecret) {
    throw new ObjectStoreError(
      "InvalidCredentials",
      `secret "${secretName}" needs the keys accessKeyID and accessKeySecret (found keys: ${Object.keys(data).join(", ") || "none"})`,
    );
  }
  return { accessKeyId, accessKeySecret };
}

export interface AbsCredentials {
  account: string;
  key: string;
  /** Azure Stack or an emulator; undefined is the public cloud's https://<account>.blob.core.windows.net. */
  endpoint?: string;
}

export function absCredentialsFromSecret(secretName: string, data: Record<string, string>): AbsCredentials {
  const account = text(data["storage-account"]);
  const key = text(data["storage-key"]);
  if (!account || !key) {
    throw new ObjectStoreError(
      "InvalidCredentials",
      `secret "${secretName}" needs the keys storage-account and storage-key, and storage-endpoint for Azure Stack or an emulator (found keys: ${Object.keys(data).join(", ") || "none"})`,
    );
  }
  return { account, key, endpoint: text(data["storage-endpoint"]) };
}

/** A service account's key (the JSON file the console downloads), or an OAuth 2 access token. */
export type GcsCredentials =
  | { kind: "service-account"; clientEmail: string; privateKey: string; projectId?: string }
  | { kind: "access-token"; token: string };

export function gcsCredentialsFromSecret(secretName: string, data: Record<string, string>): GcsCredentials {
  const found = `found keys: ${Object.keys(data).join(", ") || "none"}`;
  const token = text(data["access-token"]);
  const json = text(data["credentials.json"]);
  if (token && json) {
    throw new ObjectStoreError(
      "InvalidCredentials",
      `secret "${secretName}" must hold one of access-token and credentials.json, not both`,
    );
  }
  if (token) return { kind: "access-token", token };
  if (!json) {
    throw new ObjectStoreError(
      "InvalidCredentials",
      `secret "${secretName}" needs the key credentials.json (a service account key) or access-token (${found})`,
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    // The parser's message quotes the text, which holds the private key: say only where it failed.
    throw new ObjectStoreError("InvalidCredentials", `secret "${secretName}": credentials.json is not JSON`);
  }
  const record = typeof parsed === "object" && parsed !== null ? (parsed as Record<string, unknown>) : {};
  const clientEmail = text(record.client_email);
  const privateKey = text(record.private_key);
  if (record.type !== "service_account" || !clientEmail || !privateKey) {
    throw new ObjectStoreError(
      "InvalidCredentials",
      `secret "${secretName}": credentials.json must be a service account key (type "service_account" with client_email and private_key)`,
    );
  }
  return { kind: "service-account", clientEmail, privateKey, projectId: text(record.project_id) };
}
