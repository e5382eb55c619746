import { readFileSync } from "node:fs";
import { fromBinary } from "@bufbuild/protobuf";
import {
  FileDescriptorSetSchema,
  type DescriptorProto,
  type EnumDescriptorProto,
  type SourceCodeInfo_Location,
} from "@bufbuild/protobuf/wkt";
import { projectFile } from "./project-file.js";

// protoc-gen-es embeds descriptors without their source info, so the comments come from a
// descriptor set that `npm run generate` builds next to the generated code (buf keeps comments).

/** Comments of proto elements by fully qualified name: "gpu.v1.Offer.gpu_ram", "gpu.v1.GpuService.ListOffers". */
export type ProtoComments = ReadonlyMap<string, string>;

const DESCRIPTOR_SET = projectFile("gen/proto-descriptors.binpb");

// Field numbers of the descriptor messages, as used in SourceCodeInfo paths.
const FILE_MESSAGE = 4;
const FILE_ENUM = 5;
const FILE_SERVICE = 6;
const MESSAGE_FIELD = 2;
const MESSAGE_NESTED = 3;
const MESSAGE_ENUM = 4;
const ENUM_VALUE = 2;
const SERVICE_METHOD = 2;

export function loadProtoComments(file: URL | string = DESCRIPTOR_SET): ProtoComments {
  const set = fromBinary(FileDescriptorSetSchema, readFileSync(file));
  const comments = new Map<string, string>();
  for (const proto of set.file) {
    const locations = new Map<string, SourceCodeInfo_Location>();
    for (const location of proto.sourceCodeInfo?.location ?? []) locations.set(location.path.join("."), location);
    const note = (name: string, path: number[]) => {
      const location = locations.get(path.join("."));
      const text = normalize(location?.leadingComments || location?.trailingComments || "");
      if (text !== "") comments.set(name, text);
    };
    const visitEnum = (scope: string, desc: EnumDescriptorProto, path: number[]) => {
      const name = `${scope}.${desc.name}`;
      note(name, path);
      desc.value.forEach((value, i) => note(`${name}.${value.name}`, [...path, ENUM_VALUE, i]));
    };
    const visitMessage = (scope: string, desc: DescriptorProto, path: number[]) => {
      const name = `${scope}.${desc.name}`;
      note(name, path);
      desc.field.forEach((field, i) => note(`${name}.${field.name}`, [...path, MESSAGE_FIELD, i]));
      desc.nestedType.forEach((nested, i) => visitMessage(name, nested, [...path, MESSAGE_NESTED, i]));
      desc.enumType.forEach((nested, i) => visitEnum(name, nested, [...path, MESSAGE_ENUM, i]));
    };
    proto.messageType.forEach((desc, i) => visitMessage(proto.package, desc, [FILE_MESSAGE, i]));
    proto.enumType.forEach((desc, i) => visitEnum(proto.package, desc, [FILE_ENUM, i]));
    proto.service.forEach((service, i) => {
      const name = `${proto.package}.${service.name}`;
      note(name, [FILE_SERVICE, i]);
      service.method.forEach((method, j) => note(`${name}.${method.name}`, [FILE_SERVICE, i, SERVICE_METHOD, j]));
    });
  }
  return comments;
}

/** Source lines wrapped at the proto file's width become paragraphs (blank lines stay breaks). */
function normalize(comment: string): string {
  return comment
    .split(/\n\s*\n/)
    .map((paragraph) =>
      paragraph
        .split("\n")
        .map((line) => line.trim())
        .filter((line) => line !== "")
        .join(" "),
    )
    .filter((paragraph) => paragraph !== "")
    .join("\n\n");
}
