// The small amount of XML the OSS protocol needs: rendering response documents, and reading the
// two request bodies clients send (CompleteMultipartUpload and Delete). Both request documents
// are flat and tiny, so a tag scanner is enough; no XML library is pulled in for them.

/** An element as [name, content]: text, or child elements (repeated names are repeated entries). */
export type XmlElement = readonly [name: string, content: string | number | boolean | readonly XmlElement[]];

export function escapeXml(text: string): string {
  return text
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&apos;");
}

function renderElement([name, content]: XmlElement): string {
  if (typeof content === "object") return `<${name}>${content.map(renderElement).join("")}</${name}>`;
  return `<${name}>${escapeXml(String(content))}</${name}>`;
}

/** A whole document with the declaration OSS puts in front of every XML answer. */
export function renderXmlDocument(root: XmlElement): string {
  return `<?xml version="1.0" encoding="UTF-8"?>\n${renderElement(root)}`;
}

const NAMED_ENTITIES: Readonly<Record<string, string>> = {
  amp: "&",
  lt: "<",
  gt: ">",
  quot: '"',
  apos: "'",
};

/** Text content with entities (named, decimal, hex) and CDATA sections resolved. */
export function decodeXmlText(raw: string): string {
  return raw.replace(
    /<!\[CDATA\[([\s\S]*?)\]\]>|&(#x[0-9a-fA-F]+|#[0-9]+|[a-zA-Z]+);/g,
    (match, cdata, entity) => {
      if (typeof cdata === "string") return cdata;
      if (typeof entity !== "string") return match;
      if (entity.startsWith("#x")) return String.fromCodePoint(Number.parseInt(entity.slice(2), 16));
      if (entity.startsWith("#")) return String.fromCodePoint(Number.parseInt(entity.slice(1), 10));
      return NAMED_ENTITIES[entity] ?? match;
    },
  );
}

/** The inner text of every `<tag>…</tag>` (and `<tag/>` as "") directly found in `xml`, in order. */
export function elementsNamed(xml: string, tag: string): string[] {
  const pattern = new RegExp(`<${tag}(?:\\s[^>]*)?(?:/>|>([\\s\\S]*?)</${tag}\\s*>)`, "g");
  return [...xml.matchAll(pattern)].map((match) => match[1] ?? "");
}

/**
 * The decoded text of the first `<tag>` in `xml`, or undefined when there is none. Not trimmed:
 * object keys may start or end with spaces.
 */
export function firstText(xml: string, tag: string): string | undefined {
  const [first] = elementsNamed(xml, tag);
  return first === undefined ? undefined : decodeXmlText(first);
}
