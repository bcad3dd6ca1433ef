// Credentials come only from Secrets, in the layout coreos documented: for S3 the AWS CLI's
// `credentials` and `config` files (profile "default"), for OSS the keys accessKeyID and
// accessKeySecret. Values are never logged or put into messages; only key names are.
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
