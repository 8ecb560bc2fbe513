"""The slice of TensorBoard's protobuf schema a scalar reader needs, built in code.

Depending on `tensorboard` (152 MB) or TensorFlow for five messages is not
worth it, so the messages are declared here with their real field numbers
(tensorboard/compat/proto/event.proto, summary.proto, tensor.proto,
tensor_shape.proto, plugins/hparams/plugin_data.proto) in a private descriptor
pool. Fields a scalar reader never looks at (images, histograms, graphs) are
declared as `bytes` with the same numbers: same wire type, nothing decoded.
Anything else stays an unknown field, skipped by the parser.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

PACKAGE = "stabilitycli.tb"

# TensorFlow DataType enum values (types.proto)
DT_FLOAT = 1
DT_DOUBLE = 2
DT_INT32 = 3
DT_STRING = 7
DT_INT64 = 9
DT_BOOL = 10
DT_BFLOAT16 = 14
DT_HALF = 19


def _message(fdp, name: str, fields: list[tuple], oneofs: tuple[str, ...] = ()):
    """Add one message: fields are (name, number, type, label, type_name or None, oneof index)."""
    msg = fdp.message_type.add(name=name)
    for oneof in oneofs:
        msg.oneof_decl.add(name=oneof)
    for fname, number, ftype, label, type_name, oneof_index in fields:
        field = msg.field.add(name=fname, number=number, type=ftype, label=label)
        if type_name:
            field.type_name = f".{PACKAGE}.{type_name}"
        if oneof_index is not None:
            field.oneof_index = oneof_index


@lru_cache(maxsize=1)
def messages() -> dict[str, Any]:  # generated Message classes; protobuf is untyped here
    """Message classes by name: Event, HParamsPluginData (built once, on first use)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    one, rep = f.LABEL_OPTIONAL, f.LABEL_REPEATED
    i32, i64, dbl, flt = f.TYPE_INT32, f.TYPE_INT64, f.TYPE_DOUBLE, f.TYPE_FLOAT
    string, raw, msg, boolean = f.TYPE_STRING, f.TYPE_BYTES, f.TYPE_MESSAGE, f.TYPE_BOOL
    fdp = descriptor_pb2.FileDescriptorProto(
        name="stabilitycli/tensorboard_min.proto", package=PACKAGE, syntax="proto3"
    )
    _message(fdp, "Dim", [("size", 1, i64, one, None, None), ("name", 2, string, one, None, None)])
    _message(
        fdp,
        "TensorShapeProto",
        [
            ("dim", 2, msg, rep, "Dim", None),
            ("unknown_rank", 3, boolean, one, None, None),
        ],
    )
    _message(
        fdp,
        "TensorProto",
        [
            ("dtype", 1, i32, one, None, None),  # an enum on the wire is a varint
            ("tensor_shape", 2, msg, one, "TensorShapeProto", None),
            ("version_number", 3, i32, one, None, None),
            ("tensor_content", 4, raw, one, None, None),
            ("float_val", 5, flt, rep, None, None),
            ("double_val", 6, dbl, rep, None, None),
            ("int_val", 7, i32, rep, None, None),
            ("string_val", 8, raw, rep, None, None),
            ("int64_val", 10, i64, rep, None, None),
            ("bool_val", 11, boolean, rep, None, None),
            ("half_val", 13, i32, rep, None, None),  # fp16 and bf16 bit patterns
        ],
    )
    _message(
        fdp,
        "PluginData",
        [
            ("plugin_name", 1, string, one, None, None),
            ("content", 2, raw, one, None, None),
        ],
    )
    _message(
        fdp,
        "SummaryMetadata",
        [
            ("plugin_data", 1, msg, one, "PluginData", None),
            ("display_name", 2, string, one, None, None),
            ("summary_description", 3, string, one, None, None),
            ("data_class", 4, i32, one, None, None),
        ],
    )
    _message(
        fdp,
        "SummaryValue",
        [
            ("tag", 1, string, one, None, None),
            ("simple_value", 2, flt, one, None, 0),
            ("obsolete_old_style_histogram", 3, raw, one, None, 0),
            ("image", 4, raw, one, None, 0),
            ("histo", 5, raw, one, None, 0),
            ("audio", 6, raw, one, None, 0),
            ("node_name", 7, string, one, None, None),
            ("tensor", 8, msg, one, "TensorProto", 0),
            ("metadata", 9, msg, one, "SummaryMetadata", None),
        ],
        oneofs=("value",),
    )
    _message(fdp, "Summary", [("value", 1, msg, rep, "SummaryValue", None)])
    _message(
        fdp,
        "Event",
        [
            ("wall_time", 1, dbl, one, None, None),
            ("step", 2, i64, one, None, None),
            ("file_version", 3, string, one, None, 0),
            ("graph_def", 4, raw, one, None, 0),
            ("summary", 5, msg, one, "Summary", 0),
            ("log_message", 6, raw, one, None, 0),
            ("session_log", 7, raw, one, None, 0),
            ("tagged_run_metadata", 8, raw, one, None, 0),
            ("meta_graph_def", 9, raw, one, None, 0),
        ],
        oneofs=("what",),
    )
    # hparams plugin: HParamsPluginData.session_start_info.hparams (a map<string, Value>)
    _message(
        fdp,
        "HValue",
        [
            ("null_value", 1, i32, one, None, 0),
            ("number_value", 2, dbl, one, None, 0),
            ("string_value", 3, string, one, None, 0),
            ("bool_value", 4, boolean, one, None, 0),
        ],
        oneofs=("kind",),
    )
    _message(
        fdp,
        "HParamEntry",
        [
            ("key", 1, string, one, None, None),
            ("value", 2, msg, one, "HValue", None),
        ],
    )
    _message(fdp, "SessionStartInfo", [("hparams", 1, msg, rep, "HParamEntry", None)])
    _message(
        fdp,
        "HParamsPluginData",
        [
            ("version", 1, i32, one, None, None),
            ("experiment", 2, raw, one, None, 0),
            ("session_start_info", 3, msg, one, "SessionStartInfo", 0),
            ("session_end_info", 4, raw, one, None, 0),
        ],
        oneofs=("data",),
    )

    pool = descriptor_pool.DescriptorPool()  # private: no clash with tensorboard's own classes
    pool.Add(fdp)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in ("Event", "HParamsPluginData", "Summary", "SummaryValue", "TensorProto")
    }


# --- bulk decoding of the dominant record ---------------------------------------------
#
# Nearly every record of a scalar log is one `add_scalar` Event, which every
# protobuf serializer writes with the same bytes around the numbers (fields in
# number order, proto3 omits a zero step):
#
#   09 <wall_time: 8 bytes>  [10 <step: varint>]
#   2a <S>  0a <S-2>  0a <T> <tag: T bytes>  15 <float32>
#
# Parsing a million of them one by one through protobuf is most of the read
# time; checking that layout and pulling the numbers out of all records at once
# with numpy is not. A record that differs in any byte of the layout (a tensor
# scalar, two values in one summary, a step past 2**35, extra fields...) is left
# to the protobuf parser, so this only ever decodes what protobuf would decode
# to the same tag, step and value.

_STEP_VARINT_BYTES_MAX = 5  # steps below 2**35; a longer varint goes to protobuf
_SIMPLE_MIN_BYTES = 20  # the layout with no step and an empty tag


class SimpleScalars:
    """`simple_value` Events decoded in bulk: `index` into the records given, and their points."""

    def __init__(self, index, steps, values, codes, tags: list[str]) -> None:
        self.index = index  # int64: positions in the record arrays decoded here
        self.steps = steps  # int64
        self.values = values  # float64 (exactly the float32 written; NaN and ±Inf kept)
        self.codes = codes  # int64: position of each point's tag in `tags`
        self.tags = tags


def decode_simple_scalars(data: bytes, starts, ends) -> SimpleScalars:
    """Decode every record of the `add_scalar` layout among payloads `data[starts:ends]`."""
    import numpy as np

    buffer = np.frombuffer(data, dtype=np.uint8)
    last = buffer.size - 1

    def byte(at):  # clipped so a garbage offset reads some byte instead of failing
        return buffer[np.minimum(at, last)].astype(np.int64)

    candidates = np.flatnonzero(ends - starts >= _SIMPLE_MIN_BYTES)
    p, e = starts[candidates], ends[candidates]
    ok = byte(p) == 0x09
    step, width, done = _step_varints(byte, p)
    ok &= done
    q = np.where(width > 0, p + 10 + width, p + 9)  # the summary field's tag
    summary_bytes = byte(q + 1)
    s = q + 2  # the summary's first byte
    # a one-byte length (< 128; a larger byte would start a longer varint), and nothing after it
    ok &= (byte(q) == 0x2A) & (summary_bytes < 0x80) & (summary_bytes == e - s)
    value_bytes, tag_bytes = byte(s + 1), byte(s + 3)
    ok &= (byte(s) == 0x0A) & (value_bytes == summary_bytes - 2)  # exactly one Value
    ok &= (byte(s + 2) == 0x0A) & (value_bytes == tag_bytes + 7)  # tag and a float, nothing else
    ok &= byte(s + 4 + tag_bytes) == 0x15
    kept = np.flatnonzero(ok)
    s, step, tag_bytes = s[kept], step[kept], tag_bytes[kept]
    at_float = s + 5 + tag_bytes
    raw = buffer[at_float[:, None] + np.arange(4)]
    values = raw.view("<f4").ravel().astype(np.float64)
    codes, tags, good = _tag_codes(buffer, s + 4, tag_bytes)
    index = candidates[kept]
    return SimpleScalars(index[good], step[good], values[good], codes[good], tags)


def _step_varints(byte, p):
    """The step of each Event starting at `p`: (value, varint width, decodable).

    Width 0 means the Event has no step field."""
    import numpy as np

    has_step = byte(p + 9) == 0x10
    step = np.zeros(p.size, dtype=np.int64)
    width = np.zeros(p.size, dtype=np.int64)
    done = ~has_step
    for k in range(_STEP_VARINT_BYTES_MAX):
        b = byte(p + 10 + k)
        live = ~done
        step |= np.where(live, (b & 0x7F) << (7 * k), 0)
        width += live
        done |= b < 0x80
    return step, width, done


def _tag_codes(buffer, tag_starts, tag_bytes):
    """Each record's tag as a code into a list of distinct tags, and which tags were valid UTF-8."""
    import numpy as np

    codes = np.zeros(tag_starts.size, dtype=np.int64)
    good = np.ones(tag_starts.size, dtype=bool)
    tags: list[str] = []
    for size in np.unique(tag_bytes).tolist():
        rows = np.flatnonzero(tag_bytes == size)
        if size == 0:
            codes[rows] = len(tags)
            tags.append("")
            continue
        starts = tag_starts[rows]
        first = buffer[starts[0] : starts[0] + size]
        if all((buffer[starts + k] == first[k]).all() for k in range(size)):
            # one tag of this length, the usual case: compared byte column by byte column,
            # without building a rows x size matrix or sorting it
            distinct, inverse = [first.tobytes()], np.zeros(rows.size, dtype=np.int64)
        else:
            matrix = np.ascontiguousarray(buffer[starts[:, None] + np.arange(size)])
            keys = matrix.view(np.dtype((np.void, size))).ravel()
            distinct, inverse = np.unique(keys, return_inverse=True)
            distinct = distinct.tolist()
        base = len(tags)
        for k, raw in enumerate(distinct):
            try:
                tags.append(bytes(raw).decode("utf-8"))
            except UnicodeDecodeError:  # protobuf rejects it: leave those records to it
                tags.append("")
                good[rows[inverse.ravel() == k]] = False
        codes[rows] = base + inverse.ravel()
    return codes, tags, good
