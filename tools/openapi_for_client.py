"""Writes the OpenAPI document as swift-openapi-generator 1.14 reads nullable values (tools/generate-client).

The contract spells a nullable value `oneOf: [<schema>, {type: 'null'}]` (JSON Schema 2020-12), which the
generator skips ("Schema null is not supported"), dropping the member, so that a client would refuse every
answer that has it. Here each such schema becomes the same schema with `'null'` added to its `type`
(`{type: [string, 'null'], format: date-time}`), and a member that is always null (`{type: 'null'}`) a nullable
string. The meaning is unchanged; the served document and the contract are not touched.

  python3 tools/openapi_for_client.py IN.yaml OUT.yaml
"""
import copy, sys

import yaml

doc = yaml.safe_load(open(sys.argv[1]))
schemas = doc["components"]["schemas"]


def resolve(s):
    while isinstance(s, dict) and "$ref" in s and len(s) <= 2:
        s = schemas[s["$ref"].split("/")[-1]]
    return s


def nullable(s):
    """`s` with null allowed, or None when that cannot be said with a type list."""
    base = copy.deepcopy(resolve(s))
    if not isinstance(base, dict) or "type" not in base or "oneOf" in base or "allOf" in base:
        return None
    types = base["type"] if isinstance(base["type"], list) else [base["type"]]
    if "null" not in types:
        types = types + ["null"]
    base["type"] = types
    if "enum" in base and None not in base["enum"]:
        base["enum"] = base["enum"] + [None]
    return base


def rewrite(node):
    if isinstance(node, dict):
        one = node.get("oneOf")
        if isinstance(one, list) and len(one) == 2 and {"type": "null"} in one:
            other = one[0] if one[1] == {"type": "null"} else one[1]
            replacement = nullable(other)
            if replacement is not None:
                description = node.get("description")
                node.clear()
                node.update(replacement)
                if description:
                    node["description"] = description
        if node.get("type") == "null" and len(node) <= 2:
            node["type"] = ["string", "null"]
        for value in list(node.values()):
            rewrite(value)
    elif isinstance(node, list):
        for value in node:
            rewrite(value)


rewrite(doc)
# A property that is a $ref to a schema rewritten above is already nullable; nothing else to do.
yaml.safe_dump(doc, open(sys.argv[2], "w"), sort_keys=False, allow_unicode=True, width=200)
