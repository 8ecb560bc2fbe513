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
def messages() -> dict[str, type]:
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
    _message(fdp, "TensorShapeProto", [
        ("dim", 2, msg, rep, "Dim", None),
        ("unknown_rank", 3, boolean, one, None, None),
    ])
    _message(fdp, "TensorProto", [
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
    ])
    _message(fdp, "PluginData", [
        ("plugin_name", 1, string, one, None, None),
        ("content", 2, raw, one, None, None),
    ])
    _message(fdp, "SummaryMetadata", [
        ("plugin_data", 1, msg, one, "PluginData", None),
        ("display_name", 2, string, one, None, None),
        ("summary_description", 3, string, one, None, None),
        ("data_class", 4, i32, one, None, None),
    ])
    _message(fdp, "SummaryValue", [
        ("tag", 1, string, one, None, None),
        ("simple_value", 2, flt, one, None, 0),
        ("obsolete_old_style_histogram", 3, raw, one, None, 0),
        ("image", 4, raw, one, None, 0),
        ("histo", 5, raw, one, None, 0),
        ("audio", 6, raw, one, None, 0),
        ("node_name", 7, string, one, None, None),
        ("tensor", 8, msg, one, "TensorProto", 0),
        ("metadata", 9, msg, one, "SummaryMetadata", None),
    ], oneofs=("value",))
    _message(fdp, "Summary", [("value", 1, msg, rep, "SummaryValue", None)])
    _message(fdp, "Event", [
        ("wall_time", 1, dbl, one, None, None),
        ("step", 2, i64, one, None, None),
        ("file_version", 3, string, one, None, 0),
        ("graph_def", 4, raw, one, None, 0),
        ("summary", 5, msg, one, "Summary", 0),
        ("log_message", 6, raw, one, None, 0),
        ("session_log", 7, raw, one, None, 0),
        ("tagged_run_metadata", 8, raw, one, None, 0),
        ("meta_graph_def", 9, raw, one, None, 0),
    ], oneofs=("what",))
    # hparams plugin: HParamsPluginData.session_start_info.hparams (a map<string, Value>)
    _message(fdp, "HValue", [
        ("null_value", 1, i32, one, None, 0),
        ("number_value", 2, dbl, one, None, 0),
        ("string_value", 3, string, one, None, 0),
        ("bool_value", 4, boolean, one, None, 0),
    ], oneofs=("kind",))
    _message(fdp, "HParamEntry", [
        ("key", 1, string, one, None, None),
        ("value", 2, msg, one, "HValue", None),
    ])
    _message(fdp, "SessionStartInfo", [("hparams", 1, msg, rep, "HParamEntry", None)])
    _message(fdp, "HParamsPluginData", [
        ("version", 1, i32, one, None, None),
        ("experiment", 2, raw, one, None, 0),
        ("session_start_info", 3, msg, one, "SessionStartInfo", 0),
        ("session_end_info", 4, raw, one, None, 0),
    ], oneofs=("data",))

    pool = descriptor_pool.DescriptorPool()  # private: no clash with tensorboard's own classes
    pool.Add(fdp)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in ("Event", "HParamsPluginData", "Summary", "SummaryValue", "TensorProto")
    }
