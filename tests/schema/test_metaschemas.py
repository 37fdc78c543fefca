"""The drafts' metaschemas strict mode ships (``bankml/schema/metaschemas.json.gz``), so that a ``$ref`` to one of
them resolves: each file equal to json-schema.org's, as the ``jsonschema-specifications`` package carries them.

The file is built by this module (``python -m tests.schema.test_metaschemas --write``); the metaschemas are the JSON
Schema specification authors' (BSD-3-Clause, or AFL-3.0; json-schema-org/json-schema-spec's LICENSE), the notice
kept in the file.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import sys

import pytest

from bankml.errors import SchemaError
from bankml.schema.strict import strict_schema_to_grammar

from .test_schema_strict import check_instances

SHIPPED = pathlib.Path(__file__).resolve().parent.parent.parent / "bankml" / "schema" / "metaschemas.json.gz"
DRAFTS = {"draft4": "4", "draft6": "6", "draft7": "7", "draft201909": "2019", "draft202012": "2020"}
NOTICE = """The JSON Schema metaschemas (json-schema.org), Copyright (c) 2022 JSON Schema Specification Authors,
licensed under the BSD-3-Clause license (or the Academic Free License 3.0), as json-schema-org/json-schema-spec's
LICENSE says:

Redistribution and use in source and binary forms, with or without modification, are permitted provided that the
following conditions are met:

1. Redistributions of source code must retain the above copyright notice, this list of conditions and the
following disclaimer.

2. Redistributions in binary form must reproduce the above copyright notice, this list of conditions and the
following disclaimer in the documentation and/or other materials provided with the distribution.

3. Neither the name of the copyright holder nor the names of its contributors may be used to endorse or promote
products derived from this software without specific prior written permission.

THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS OR IMPLIED WARRANTIES,
INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL,
SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY,
WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
"""


def built():
    """``{"notice", "drafts": {draft: {URI without fragment: metaschema}}}`` from jsonschema-specifications."""
    import jsonschema_specifications

    root = pathlib.Path(jsonschema_specifications.__file__).parent / "schemas"
    drafts = {}
    for name, draft in DRAFTS.items():
        files = [root / name / "metaschema.json"] + sorted((root / name).glob("vocabularies/*"))
        out = drafts[draft] = {}
        for f in files:
            schema = json.loads(f.read_text(encoding="utf-8"))
            out[(schema.get("$id") or schema["id"]).split("#")[0]] = schema
    return {"notice": NOTICE, "drafts": drafts}


def test_the_shipped_metaschemas_are_json_schema_orgs():
    pytest.importorskip("jsonschema_specifications")
    shipped = json.loads(gzip.decompress(SHIPPED.read_bytes()))
    assert shipped == built()
    assert "BSD-3-Clause" in shipped["notice"]


def test_a_ref_to_the_metaschema():
    # the 2020-12 metaschema asserts uniqueItems over strings (not built) and format "regex": refused, naming
    # where in the metaschema; with both as annotations, schemas are told from non-schemas
    schema = {"$ref": "https://json-schema.org/draft/2020-12/schema"}
    with pytest.raises(SchemaError) as info:
        strict_schema_to_grammar(schema)
    assert info.value.keyword == "uniqueItems"
    assert info.value.pointer.startswith("https://json-schema.org/draft/2020-12/meta/validation#/")
    gbnf = strict_schema_to_grammar(schema, lenient={"uniqueItems", "format"})
    assert gbnf


def test_a_ref_into_a_metaschema_is_checked_against_jsonschema():
    nonneg = {"$ref": "https://json-schema.org/draft/2020-12/meta/validation#/$defs/nonNegativeInteger"}
    check_instances(nonneg, [0, 5, -1, 1.5, "a", None])
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$ref": "http://json-schema.org/draft-07/schema#/definitions/simpleTypes",
    }
    check_instances(draft7, ["string", "integer", "int", 1])


def test_a_metaschema_of_another_draft_is_refused():
    schema = {"$ref": "http://json-schema.org/draft-07/schema#"}
    with pytest.raises(SchemaError) as info:
        strict_schema_to_grammar(schema)
    assert info.value.keyword == "$ref" and "draft" in str(info.value)


if __name__ == "__main__" and "--write" in sys.argv:
    SHIPPED.write_bytes(gzip.compress(json.dumps(built(), sort_keys=True).encode("utf-8"), mtime=0))
