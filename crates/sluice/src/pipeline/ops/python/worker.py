# The Python side of sluice's `python` operation, run by the interpreter a
# worker keeps (embedded in the sluice binary; it imports nothing of the
# sluice package, so any interpreter with the step's own imports runs it).
#
#   python -c <this> inspect MODULE:FUNCTION   one JSON line: where the function
#                                              is defined, its signature, the
#                                              roles its @sluice.op declares
#   python -c <this> serve                     one JSON request per line on
#                                              stdin, one reply per line on the
#                                              channel (the first stdout)
#
# A request names the function, the unit's input files by role, its params
# and its output roles; the reply lists the files written for each output
# role, or the exception and its traceback. Prints of the function are
# captured per unit and returned as its log; file descriptor 1 is pointed at
# stderr so that nothing a library prints can break the channel.
import base64
import dataclasses
import datetime
import importlib
import importlib.util
import inspect
import io
import json
import os
import sys
import threading
import traceback

_functions = {}


class StepError(Exception):
    """A mistake of the step, said to the user without a traceback."""


def load(spec):
    """The function `spec` (MODULE:NAME or FILE.py:NAME) names, imported once."""
    if spec in _functions:
        return _functions[spec]
    module_name, sep, qualname = spec.rpartition(":")
    if not sep or not module_name or not qualname:
        raise StepError(f"`{spec}` is not of the form \"module:function\" or \"file.py:function\"")
    if module_name.endswith(".py") or "/" in module_name:
        if not os.path.isfile(module_name):
            raise StepError(f"no file {module_name}")
        name = "sluice_step_" + "".join(c if c.isalnum() else "_" for c in module_name)
        loader_spec = importlib.util.spec_from_file_location(name, module_name)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        try:
            loader_spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    else:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and module_name.startswith(e.name):
                raise StepError(
                    f"no module `{module_name}` on the interpreter's path "
                    f"({sys.executable}; PYTHONPATH={os.environ.get('PYTHONPATH', '')!r})"
                ) from None
            raise
    target = module
    for part in qualname.split("."):
        if not hasattr(target, part):
            raise StepError(f"module `{module_name}` has no `{qualname}`")
        target = getattr(target, part)
    if not callable(target):
        raise StepError(f"`{qualname}` in `{module_name}` is a {type(target).__name__}, not a function")
    _functions[spec] = target
    return target


def describe(spec):
    function = load(spec)
    defined_in = sys.modules.get(getattr(function, "__module__", None) or "")
    origin = getattr(defined_in, "__file__", None)
    try:
        signature = inspect.signature(function)
        parameters = [
            {"name": p.name, "kind": p.kind.name, "default": p.default is not inspect.Parameter.empty}
            for p in signature.parameters.values()
        ]
    except (TypeError, ValueError):
        parameters = None
    declared = getattr(function, "__sluice_op__", None)
    return {
        "origin": os.path.abspath(origin) if origin else None,
        "qualname": getattr(function, "__qualname__", spec),
        "python": "%d.%d" % sys.version_info[:2],
        "parameters": parameters,
        "outputs": dict(declared["outputs"]) if isinstance(declared, dict) and "outputs" in declared else None,
    }


def read_input(item):
    if "value" in item:
        return item["value"]
    kind = item["type"]
    if kind == "data":
        try:
            import polars
        except ImportError:
            raise StepError("data inputs arrive as polars.DataFrame: install polars in the step's interpreter") from None
    if "ipc" in item:
        return polars.read_ipc_stream(io.BytesIO(base64.b64decode(item["ipc"])))
    path = item["path"]
    if kind == "data":
        fmt = item.get("format", "csv")
        if fmt == "parquet":
            return polars.read_parquet(path)
        if fmt == "csv":
            return polars.read_csv(path)
        try:
            return polars.read_ipc(path)
        except Exception:
            return polars.read_ipc_stream(path)
    if kind == "file_ref":
        import pathlib

        return pathlib.Path(path)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def as_record(value, role):
    """A dataclass instance or a pydantic model (a type declared from a
    class with `Lake.declare`) as the dict of its fields, times as RFC 3339
    text (a time without a timezone is refused, as `Lake.put` refuses it:
    the lake keeps UTC and will not guess a zone); anything else unchanged."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        record = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif hasattr(value, "model_dump") and not isinstance(value, type):
        record = value.model_dump()
    else:
        return value
    out = {}
    for name, field in record.items():
        if isinstance(field, datetime.datetime):
            if field.tzinfo is None:
                raise StepError(
                    f"output `{role}`, field `{name}` {field.isoformat()}: a time without a "
                    "timezone is ambiguous. Help: give one, e.g. datetime.now(timezone.utc)"
                )
            field = field.isoformat()
        out[name] = field
    return out


def write_output(role, kind, value, folder, n):
    """One returned value as the worker takes it for `role`: the path of a
    file (data, file_ref) or the dict itself."""
    if kind == "file_ref":
        if isinstance(value, (str, os.PathLike)) and os.path.isfile(value):
            return os.path.abspath(os.fspath(value))
        raise StepError(
            f"output `{role}` (file_ref) takes the path of an existing file, got {value!r:.200}"
        )
    if kind == "data":
        path = os.path.join(folder, f"{role}-{n}.parquet")
        if hasattr(value, "write_parquet"):
            value.write_parquet(path)
            return path
        module = type(value).__module__.split(".")[0]
        if module == "pyarrow" and type(value).__name__ == "Table":
            import pyarrow.parquet

            pyarrow.parquet.write_table(value, path)
            return path
        if module == "pandas" and type(value).__name__ == "DataFrame":
            value.to_parquet(path)
            return path
        raise StepError(
            f"output `{role}` (data) takes a polars.DataFrame, a pyarrow.Table or a pandas.DataFrame, "
            f"got {type(value).__name__}"
        )
    value = as_record(value, role)
    if not isinstance(value, dict):
        raise StepError(
            f"output `{role}` ({kind}) takes a dict, a dataclass or a pydantic model, "
            f"got {type(value).__name__}"
        )
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise StepError(f"output `{role}` ({kind}) is not JSON: {e}") from None
    # A dict travels in the reply itself: no file to write and read back.
    return value


def run(request):
    function = load(request["function"])
    declared = getattr(function, "__sluice_op__", None) or {}
    outputs = request["outputs"] or dict(declared.get("outputs") or {})
    kwargs = dict(request["params"])
    for role, items in request["inputs"].items():
        values = [read_input(item) for item in items]
        kwargs[role] = values if request["lists"] else values[0]
    result = function(**kwargs)
    if result is None:
        result = {}
    if not isinstance(result, dict):
        raise StepError(
            f"returned a {type(result).__name__}; a python step returns a dict of output role -> "
            f"value (roles: {', '.join(sorted(outputs))})"
        )
    unknown = sorted(set(result) - set(outputs))
    if unknown:
        raise StepError(
            f"returned output role(s) {', '.join(map(str, unknown))} the step does not declare "
            f"(its roles: {', '.join(sorted(outputs))})"
        )
    folder = request["out_dir"]
    os.makedirs(folder, exist_ok=True)
    written = []
    for role, value in result.items():
        values = value if isinstance(value, list) else [] if value is None else [value]
        for n, one in enumerate(values):
            out = write_output(role, outputs[role], one, folder, n)
            key = "value" if isinstance(out, dict) else "path"
            written.append({"role": role, "type": outputs[role], key: out})
    return written


def user_traceback(error):
    """The traceback of `error` from the user's code on: this script's
    frames (compiled from "<string>") say nothing to the user."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


def serve():
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    parent = os.getppid()

    def watch():
        import time

        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(137)

    threading.Thread(target=watch, daemon=True).start()
    for line in sys.stdin:
        request = json.loads(line)
        log = io.StringIO()
        stdout, stderr = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = log
        try:
            reply = {"ok": True, "outputs": run(request)}
        except StepError as e:
            reply = {"ok": False, "error": str(e)}
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            text = "".join(traceback.format_exception_only(type(e), e)).strip()
            reply = {"ok": False, "error": f"raised {text}", "traceback": user_traceback(e)}
        finally:
            sys.stdout, sys.stderr = stdout, stderr
        reply["log"] = log.getvalue()[-4096:]
        channel.write(json.dumps(reply) + "\n")
        channel.flush()


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        serve()
    elif len(sys.argv) == 3 and sys.argv[1] == "inspect":
        try:
            out = describe(sys.argv[2])
        except StepError as e:
            out = {"error": str(e)}
        except BaseException as e:
            out = {"error": "importing it raised " + "".join(traceback.format_exception_only(type(e), e)).strip()}
        print(json.dumps(out))
    else:
        sys.exit("usage: worker.py serve | inspect MODULE:FUNCTION")


main()
