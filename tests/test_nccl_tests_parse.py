"""Reading nccl-tests output as printed (ringccl.bench.nccl_tests).

The logs in tests/data/nccl_tests are written by generate.py there with nccl-tests' own format
strings (src/util.cu of v2.17, src/common.cu of v2.13 and of the v2.0-era releases); their
numbers are ours. Expected values below are read off the files by eye, not computed by the
parser under test.
"""

import pathlib

import pytest

from ringccl.bench.nccl_tests import looks_like_nccl_tests, parse_nccl_tests, read_nccl_tests
from ringccl.costmodel.fit import load_rows
from ringccl.errors import ArgumentError

DATA = pathlib.Path(__file__).parent / "data" / "nccl_tests"


@pytest.mark.parametrize("name, collective, world, ppn, nodes, sizes", [
    ("h100_1node_all_reduce.log", "all_reduce", 8, 8, 1, 31),
    ("h100_1node_all_gather.log", "all_gather", 8, 8, 1, 24),
    ("h100_4node_all_reduce.log", "all_reduce", 32, 8, 4, 25),
    ("h100_4node_reduce_scatter.log", "reduce_scatter", 32, 8, 4, 23),
    ("h100_2node_alltoall.log", "all_to_all", 16, 8, 2, 22),
    ("h100_2node_sendrecv.log", "send_recv", 2, 1, 2, 31),
    ("a100_1node_all_reduce_perf_v2.0.log", "all_reduce", 8, 8, 1, 26),
])
def test_every_fixture_gives_its_placement_and_rows(name, collective, world, ppn, nodes, sizes):
    log = read_nccl_tests(DATA / name)
    assert (log.collective, log.world_size, log.ranks_per_node, log.nodes) == (
        collective, world, ppn, nodes)
    assert len(log.rows) == 2 * sizes  # out-of-place and in-place per size
    assert {r["placement"] for r in log.rows} == {"out-of-place", "in-place"}
    assert all(r["time_s"] > 0 and r["source"] == "nccl-tests" for r in log.rows)
    assert len(log.hosts) == nodes and "NVIDIA" in log.device


def test_a_data_line_is_read_field_by_field():
    log = read_nccl_tests(DATA / "h100_1node_all_reduce.log")
    first = [r for r in log.rows if r["size"] == 8]
    oop = next(r for r in first if r["placement"] == "out-of-place")
    ip = next(r for r in first if r["placement"] == "in-place")
    # "           8             2     float     sum      -1    11.29    0.00    0.00       0
    #      11.32    0.00    0.00       0"
    assert (oop["count"], oop["type"], oop["redop"], oop["root"]) == (2, "float", "sum", "-1")
    assert oop["time_s"] == pytest.approx(11.29e-6) and ip["time_s"] == pytest.approx(11.32e-6)
    assert oop["wrong"] == 0
    last = [r for r in log.rows if r["size"] == 8589934592 and r["placement"] == "in-place"][0]
    # "  8589934592    2147483648 ... 32063.2  267.91  468.84       0  32404.9  265.08  463.89"
    assert last["time_s"] == pytest.approx(32404.9e-6)
    assert last["algbw"] == pytest.approx(265.08e9) and last["busbw"] == pytest.approx(463.89e9)
    assert log.avg_busbw == pytest.approx(155.795e9)


def test_the_old_layout_without_root_and_with_error_columns():
    log = read_nccl_tests(DATA / "a100_1node_all_reduce_perf_v2.0.log")
    row = next(r for r in log.rows if r["size"] == 32 and r["placement"] == "out-of-place")
    assert row["root"] is None and row["redop"] == "sum" and row["wrong"] == 0
    assert row["time_s"] == pytest.approx(14.92e-6)
    assert log.collective == "all_reduce"  # from the file name


def test_the_program_comes_from_a_pasted_command_line():
    text = (DATA / "h100_4node_reduce_scatter.log").read_text()
    assert "Collective test starting" not in text and "reduce_scatter_perf" in text
    assert parse_nccl_tests(text).collective == "reduce_scatter"


def test_launcher_prefixes_are_tolerated():
    text = (DATA / "h100_1node_all_gather.log").read_text()
    prefixed = "\n".join(f"Thu Jul 18 15:41:05 2024<stdout>:{line}" for line in
                         text.splitlines())
    a, b = parse_nccl_tests(text), parse_nccl_tests(prefixed)
    assert [(r["size"], r["time_s"]) for r in a.rows] == [(r["size"], r["time_s"])
                                                           for r in b.rows]
    assert (b.world_size, b.nodes) == (8, 1)


def test_nccl_algo_on_the_command_line_is_recorded():
    text = "$ mpirun -x NCCL_ALGO=Ring -x NCCL_PROTO=Simple ./all_reduce_perf -b 8\n" + (
        DATA / "h100_4node_all_reduce.log").read_text()
    log = parse_nccl_tests(text)
    assert (log.nccl_algo, log.nccl_proto) == ("Ring", "Simple")
    assert log.rows[0]["nccl_algo"] == "Ring"


def _strip_names(text: str) -> str:
    return "\n".join(line for line in text.splitlines()
                     if "Collective test" not in line and "_perf" not in line)


def test_columns_name_what_they_can():
    # all_reduce: busbw/algbw = 2(n-1)/n; reduce_scatter: a reduction whose size is N blocks
    ar = _strip_names((DATA / "h100_4node_all_reduce.log").read_text())
    assert parse_nccl_tests(ar).collective == "all_reduce"
    rs = _strip_names((DATA / "h100_4node_reduce_scatter.log").read_text())
    assert parse_nccl_tests(rs).collective == "reduce_scatter"
    # all_gather and alltoall print alike: the caller must say
    ag = _strip_names((DATA / "h100_1node_all_gather.log").read_text())
    with pytest.raises(ArgumentError, match="cannot tell which nccl-tests program"):
        parse_nccl_tests(ag)
    assert parse_nccl_tests(ag, collective="all_gather_perf").collective == "all_gather"
    with pytest.raises(ArgumentError, match="not an nccl-tests program ringccl reads"):
        parse_nccl_tests(ag, collective="hypercube_perf")


def test_bad_input_is_named():
    with pytest.raises(ArgumentError, match="no nccl-tests column header"):
        parse_nccl_tests("# nThread 1 nGpus 1\nhello\n", "x.log")
    text = (DATA / "h100_1node_all_gather.log").read_text()
    header_only = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    with pytest.raises(ArgumentError, match="no data line"):
        parse_nccl_tests(header_only)
    uneven = text.replace("#  Rank  7 Group  0 Pid  41407 on   dgx-h-01",
                          "#  Rank  7 Group  0 Pid  41407 on   dgx-h-02")
    with pytest.raises(ArgumentError, match="unevenly"):
        parse_nccl_tests(uneven)
    assert looks_like_nccl_tests(text) and not looks_like_nccl_tests('{"rows": []}')
    with pytest.raises(ArgumentError, match="names gather_perf"):
        parse_nccl_tests(text.replace("all_gather_perf", "gather_perf"))


def test_the_fit_loader_reads_logs_and_json_together(tmp_path):
    import json
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"rows": [{"collective": "all_reduce", "algorithm": "ring",
                                           "world_size": 2, "size": 1024, "time_s": 1.0}]}))
    rows = load_rows([bench, DATA / "h100_2node_sendrecv.log"])
    assert len(rows) == 1 + 62 and rows[1]["collective"] == "send_recv"
    other = tmp_path / "notes.txt"
    other.write_text("some text\n")
    with pytest.raises(ArgumentError, match="neither JSON .* nor nccl-tests output"):
        load_rows([other])


# -- which program: a *_perf name with more after it -----------------------------------------

@pytest.mark.parametrize("name", ["all_gather_perf_1node.txt", "runs/all_gather_perf_2024.log",
                                  "h100_all_gather_perf.log", "all_gather_perf_mpi.log"])
def test_a_file_name_with_more_after_perf_names_the_program(name):
    # the user trial's file: nothing in the text says which program printed it
    ag = _strip_names((DATA / "h100_1node_all_gather.log").read_text())
    assert parse_nccl_tests(ag, name).collective == "all_gather"


def test_a_pasted_command_line_with_a_suffix_names_the_program():
    ag = _strip_names((DATA / "h100_1node_all_gather.log").read_text())
    text = "$ mpirun -np 8 ./build/all_gather_perf_mpi -b 8 -e 8G\n" + ag
    assert parse_nccl_tests(text).collective == "all_gather"


def test_a_word_that_starts_with_perf_names_no_program_and_the_message_names_the_flag():
    ag = _strip_names((DATA / "h100_1node_all_gather.log").read_text())
    with pytest.raises(ArgumentError, match="cannot tell which nccl-tests program") as err:
        parse_nccl_tests(ag, "foo_performance.txt")
    # the flag `ringccl fit` has (--program), not one it lacks
    assert "--program alltoall_perf" in str(err.value) and "--collective" not in str(err.value)


# -- data lines: malformed, cut off, #wrong; what is not data still parses --------------------

def _lines():
    return (DATA / "h100_1node_all_gather.log").read_text().splitlines()


def _data_index(lines, size):
    return next(i for i, line in enumerate(lines) if line.split()[:1] == [str(size)])


def test_a_malformed_data_line_is_an_error_quoting_it_with_its_number():
    lines = _lines()
    i = _data_index(lines, 1048576)
    fields = lines[i].split()
    fields[5] = "garbage"                     # the out-of-place time
    lines[i] = "  ".join(fields)
    with pytest.raises(ArgumentError, match=rf"x\.log, line {i + 1}: '1048576 .*garbage.*' "
                                            "starts with a size but is not an nccl-tests data "
                                            r"line \(expected 13 columns"):
        parse_nccl_tests("\n".join(lines) + "\n", "x.log")
    # too few fields in the middle of the log is no cut-off end: an error too
    lines = _lines()
    lines[i] = "  ".join(lines[i].split()[:7])
    with pytest.raises(ArgumentError, match=f"line {i + 1}: '1048576"):
        parse_nccl_tests("\n".join(lines) + "\n", "x.log")


def test_a_cut_off_last_line_is_left_out_with_a_note():
    lines = _lines()
    last = max(i for i, line in enumerate(lines) if line.split()[:1] and line.split()[0].isdigit())
    full = parse_nccl_tests("\n".join(lines) + "\n", "x.log")
    assert full.notes == [] and all(r["log_notes"] == [] for r in full.rows)
    # the run (or the copy) stopped mid-row: no newline after it
    cut = "\n".join(lines[:last] + [lines[last][:40]])
    log = parse_nccl_tests(cut, "x.log")
    assert {r["size"] for r in full.rows} - {r["size"] for r in log.rows} == {8589934592}
    (note,) = log.notes
    assert f"x.log, line {last + 1}: the log's last line is cut short and was left out" in note
    assert log.rows[0]["log_notes"] == [note]
    # the same with a newline after the partial row: too few fields at the end of the log
    assert parse_nccl_tests(cut + "\n", "x.log").notes == [note]


def test_rows_with_wrong_results_are_left_out_with_a_note_naming_their_sizes():
    lines = _lines()
    for size, column in ((1048576, 12), (2097152, 12), (4194304, 8)):   # #wrong in, out of place
        i = _data_index(lines, size)
        fields = lines[i].split()
        fields[column] = "3"
        lines[i] = "  ".join(fields)
    log = parse_nccl_tests("\n".join(lines) + "\n", "x.log")
    left = {(r["size"], r["placement"]) for r in log.rows}
    assert (1048576, "in-place") not in left and (1048576, "out-of-place") in left
    assert (4194304, "out-of-place") not in left and (4194304, "in-place") in left
    assert len(log.rows) == 48 - 3 and all(r["wrong"] == 0 for r in log.rows)
    (note,) = log.notes
    assert note.startswith("x.log: #wrong != 0 at 1048576, 2097152 bytes (in-place); 4194304 "
                           "bytes (out-of-place): those rows are left out")
    assert "not to be trusted" in note
    # nothing right at all: an error, not an empty fit
    wrong = [" ".join(line.split()[:8] + ["1"] + line.split()[9:12] + ["1"])
             if line.split()[:1] and line.split()[0].isdigit() else line for line in _lines()]
    with pytest.raises(ArgumentError, match="every data line has #wrong != 0"):
        parse_nccl_tests("\n".join(wrong) + "\n", "x.log")


def test_the_old_error_column_is_wrong_only_above_nccl_tests_tolerance():
    lines = (DATA / "a100_1node_all_reduce_perf_v2.0.log").read_text().splitlines()
    for size, value in ((64, "2e-07"), (128, "3e-02")):    # float: 1e-5 allowed
        i = _data_index(lines, size)
        lines[i] = lines[i].replace("0e+00", value, 1)     # the out-of-place error
    log = parse_nccl_tests("\n".join(lines) + "\n", "a100_1node_all_reduce_perf_v2.0.log")
    oop = {r["size"]: r for r in log.rows if r["placement"] == "out-of-place"}
    assert oop[64]["wrong"] == 0 and 128 not in oop
    assert "error above nccl-tests' tolerance at 128 bytes (out-of-place)" in log.notes[0]


def test_what_nccl_tests_prints_that_is_not_data_still_parses():
    lines = _lines()
    i = _data_index(lines, 1048576)
    fields = lines[i].split()
    fields[8] = fields[12] = "N/A"           # -c 0: no check, nothing to leave out
    lines[i] = "  ".join(fields)
    lines[i + 1:i + 1] = ["[1,0]<stdout>:# a comment from the launcher",
                          "dgx-h-01:41400:41400 [0] NCCL INFO comm 0x55 rank 0 nranks 8 - Init "
                          "COMPLETE", "", "NCCL version 2.21.5+cuda12.4"]
    log = parse_nccl_tests("\n".join(lines) + "\n", "x.log")
    assert len(log.rows) == 48 and log.notes == []
    assert {r["wrong"] for r in log.rows if r["size"] == 1048576} == {None}
    assert log.avg_busbw is not None           # the footer as before


def test_the_notes_travel_with_the_rows_through_the_fit_loader(tmp_path):
    lines = _lines()
    last = max(i for i, line in enumerate(lines) if line.split()[:1] and line.split()[0].isdigit())
    path = tmp_path / "all_gather_perf_1node.txt"
    path.write_text("\n".join(lines[:last] + [lines[last][:40]]))
    rows = load_rows([path])
    assert rows and all(len(r["log_notes"]) == 1 for r in rows)
    assert "all_gather_perf_1node.txt, line" in rows[0]["log_notes"][0]


# -- time 0.00, several runs in one file, a contradicting program, a one-group header ----------

def test_rows_of_time_zero_are_left_out_with_a_note_naming_size_and_line():
    lines = _lines()
    i = _data_index(lines, 131072)
    fields = lines[i].split()
    # both placements, as nccl-tests prints them: "%7.2f" of no time, the bandwidths over it
    fields[5:8] = fields[9:12] = ["0.00", "inf", "inf"]
    lines[i] = "  ".join(fields)
    log = parse_nccl_tests("\n".join(lines) + "\n", "x.log")
    assert 131072 not in {r["size"] for r in log.rows} and len(log.rows) == 48 - 2
    assert all(r["time_s"] > 0 for r in log.rows)
    (note,) = log.notes
    assert note.startswith(f"x.log: time 0.00 at 131072 bytes (out-of-place); 131072 bytes "
                           f"(in-place) (line {i + 1}): those rows are left out")
    j = _data_index(lines, 262144)
    fields = lines[j].split()
    fields[9:12] = ["nan", "nan", "nan"]
    lines[j] = "  ".join(fields)
    (note,) = parse_nccl_tests("\n".join(lines) + "\n", "x.log").notes
    assert note.startswith(f"x.log: time 0.00, inf or nan at 131072 bytes (out-of-place); "
                           f"131072, 262144 bytes (in-place) (lines {i + 1}, {j + 1}): ")
    # nothing measured at all: refused, not an empty fit
    zero = [" ".join(line.split()[:5] + ["0.00"] + line.split()[6:9] + ["0.00"]
                     + line.split()[10:]) if line.split()[:1] and line.split()[0].isdigit()
            else line for line in _lines()]
    with pytest.raises(ArgumentError, match="every data line has time 0.00"):
        parse_nccl_tests("\n".join(zero) + "\n", "x.log")


def _concatenated(tmp_path):
    """all_reduce_perf, then all_gather_perf, printed into one file by a shell loop."""
    ar = (DATA / "h100_1node_all_reduce.log").read_text()
    ag = (DATA / "h100_1node_all_gather.log").read_text()
    path = tmp_path / "runs.log"
    path.write_text(ar + ag)
    return path, len(ar.splitlines())


def test_runs_printed_into_one_file_are_read_each_as_its_own_log(tmp_path):
    path, first = _concatenated(tmp_path)
    rows = load_rows([path])
    by_file = {}
    for r in rows:
        by_file.setdefault(r["file"], set()).add(r["collective"])
    assert by_file == {f"{path} (run 1 of 2)": {"all_reduce"},
                       f"{path} (run 2 of 2)": {"all_gather"}}
    assert len(rows) == 2 * 31 + 2 * 24
    # read as one run, it is refused at the line where the second starts
    with pytest.raises(ArgumentError, match=rf"runs\.log, line {first + 1}: a second "
                                            "nccl-tests run starts here"):
        read_nccl_tests(path)
    # a message about the second run gives the file's line number
    lines = path.read_text().splitlines()
    i = next(k for k in range(first, len(lines)) if lines[k].split()[:1] == ["1048576"])
    fields = lines[i].split()
    fields[5] = "garbage"
    lines[i] = "  ".join(fields)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ArgumentError, match=rf"\(run 2 of 2\), line {i + 1}: '1048576"):
        load_rows([path])


def test_a_second_header_without_a_run_before_it_is_refused(tmp_path):
    lines = _lines()
    h = next(i for i, line in enumerate(lines) if "#wrong" in line)
    path = tmp_path / "all_gather_perf.log"
    path.write_text("\n".join(lines + lines[h:]) + "\n")
    with pytest.raises(ArgumentError, match=rf"line {len(lines) + 1}: a second nccl-tests "
                                            "column header with no run's preamble"):
        load_rows([path])


def test_a_program_that_contradicts_the_log_is_refused_naming_both():
    text = (DATA / "h100_1node_all_reduce.log").read_text()
    with pytest.raises(ArgumentError, match=r"x\.log, line 2: the log names its program, "
                                            r"all_reduce_perf .*program='alltoall_perf' "
                                            r"\(fit --program\) names alltoall_perf"):
        parse_nccl_tests(text, "x.log", collective="alltoall_perf")
    assert parse_nccl_tests(text, "x.log", collective="all_reduce_perf").collective == \
        "all_reduce"
    # a file name that names the program contradicts it too
    ag = _strip_names((DATA / "h100_1node_all_gather.log").read_text())
    with pytest.raises(ArgumentError, match="names all_gather_perf, and program='alltoall_perf'"):
        parse_nccl_tests(ag, "all_gather_perf.log", collective="alltoall_perf")
    # a name ringccl does not read in the text: --program stands for the log (as documented)
    assert parse_nccl_tests("# hypercube_perf was here\n" + ag, "x.log",
                            collective="all_gather_perf").collective == "all_gather"


def test_a_one_group_header_takes_its_placement_from_its_label():
    lines = _lines()
    h = next(i for i, line in enumerate(lines) if "#wrong" in line)
    one = [line for line in lines]
    one[h - 1] = "#" + " " * 60 + "out-of-place"
    one[h] = "  ".join(lines[h].split()[:10])
    for i in range(h + 2, len(one)):
        if one[i].split()[:1] and one[i].split()[0].isdigit():
            one[i] = "  ".join(one[i].split()[:9])
    log = parse_nccl_tests("\n".join(one) + "\n", "x.log")
    assert {r["placement"] for r in log.rows} == {"out-of-place"} and len(log.rows) == 24
    one[h - 1] = "#" + " " * 60 + "in-place"
    assert {r["placement"] for r in parse_nccl_tests("\n".join(one) + "\n").rows} == {
        "in-place"}
