"""Opt-in bf16 and int8 inference: close to fp32, still independent of batch companions, weights
tracked; int8's quantization."""

import random

import close_to_fp32
import numpy as np
import pytest
import torch
from close_to_fp32 import assert_as_promised, cosines, layer_errors
from conftest import make_nlp, random_bilm, run_cli
from cpu_features import cpu_has_instructions_for, int8_kernel_should_be_exact

from spacy_elmo import BiLMRunner, embed_sentences
from spacy_elmo.kernels import quantized
from spacy_elmo.kernels.select import select

SENTENCES = [
    ["The", "bank", "raised", "its", "interest", "rates", "."],
    ["We", "sat", "on", "the", "bank", "of", "the", "river", "."],
    ["Short", "."],
]
CPU = torch.device("cpu")


def runs_here(precision):
    """A mark skipping a test of ``precision`` where this machine runs exact fp32 in its place and the
    CPU's own flags agree (where they do not, the test runs and fails: a probe regressed)."""
    choice = select(CPU, precision).choice
    skip = choice.fell_back and not cpu_has_instructions_for(precision)
    return pytest.mark.skipif(skip, reason=f"{precision} falls back to fp32 here: {choice.reason}")


REDUCED = [pytest.param(precision, marks=runs_here(precision)) for precision in ("bf16", "int8")]
FP32_SUMS = quantized.INT8_KERNELS["fp32_sums"]
# The int8 kernel this CPU runs (fp32 GEMMs, exact on any CPU, where int8 falls back).
HERE = select(CPU, "int8").int8 or FP32_SUMS
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def assert_close_to_fp32(bilm, sentences):
    """bf16 within 2% of the largest fp32 value and cosine >= 0.999 for every token of every layer."""
    exact = embed_sentences(BiLMRunner(bilm, precision="fp32"), sentences)
    reduced = embed_sentences(BiLMRunner(bilm, precision="bf16"), sentences)
    for want, got in zip(exact, reduced, strict=True):
        assert not np.array_equal(want, got), "bf16 should actually run in bf16"
        assert np.abs(want - got).max() <= 0.02 * np.abs(want).max()
        assert cosines(want, got).min() >= 0.999


def assert_within(errors, max_abs, min_cosine):
    for layer, ((error, cosine, _), error_bound, cosine_bound) in enumerate(
        zip(errors, max_abs, min_cosine, strict=True)
    ):
        assert error <= error_bound, f"layer {layer}: max abs error {error:.2e} > {error_bound:.0e}"
        assert cosine >= cosine_bound, f"layer {layer}: min cosine {cosine:.6f} < {cosine_bound}"


@pytest.fixture(scope="module")
def full_size_bilm():
    return close_to_fp32.full_size_bilm()


@runs_here("int8")
def test_int8_is_close_to_fp32_on_the_tiny_preset():
    # measured (every int8 kernel gives the same bits): max abs 1.8e-3 / 2.1e-3 / 2.4e-3, min cosine
    # 0.999997 / 0.99995 / 0.99995
    torch.manual_seed(5)
    errors = layer_errors(random_bilm("tiny"), SENTENCES, "int8")
    assert_within(errors, max_abs=[5e-3, 5e-3, 5e-3], min_cosine=[0.99998, 0.9998, 0.9998])


@pytest.mark.parametrize("precision", REDUCED)
def test_a_reduced_precision_is_as_close_to_fp32_as_the_docs_promise(fixture_bilm, fixture_sentences, precision):
    """docs/component.md's figures, from docs/promises.md, on the original release's test model:
    all three streams of its sentences."""
    assert len(fixture_sentences) == 3
    assert_as_promised(fixture_bilm, fixture_sentences, precision, "test model")


@pytest.mark.parametrize("precision", REDUCED)
def test_a_reduced_precision_on_the_full_size_model_is_as_close_as_the_docs_promise(full_size_bilm, precision):
    """The full-size rows of docs/promises.md, on three streams of real sentences."""
    assert_as_promised(full_size_bilm, close_to_fp32.real_streams(), precision, "full-size model")


@runs_here("bf16")
def test_bf16_is_close_to_fp32_on_the_tiny_preset():
    torch.manual_seed(5)
    assert_close_to_fp32(random_bilm("tiny"), SENTENCES)


@pytest.mark.parametrize("precision", REDUCED)
def test_results_do_not_depend_on_batch_companions(precision):
    """Alone, or among sentences of other lengths, under any token budget, with or without the
    token cache: the same bits."""
    torch.manual_seed(6)
    runner = BiLMRunner(random_bilm("tiny"), precision=precision)
    alone = [embed_sentences(runner, [sentence])[0] for sentence in SENTENCES]
    words = [word for sentence in SENTENCES for word in sentence]
    rng = random.Random(3)
    for trial, budget in enumerate((16, 300, 100000)):
        others = [rng.choices(words, k=rng.randint(1, 20)) for _ in range(16)]
        runner.token_cache.capacity = 0 if trial % 2 else 20000
        together = embed_sentences(runner, others[:8] + SENTENCES + others[8:], max_batch_tokens=budget)
        for want, got in zip(alone, together[8:11], strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.slow
@runs_here("int8")
def test_int8_results_do_not_depend_on_batch_companions_at_original_size(full_size_bilm):
    runner = BiLMRunner(full_size_bilm, precision="int8")
    alone = embed_sentences(runner, [SENTENCES[0]])[0]
    others = [SENTENCES[1][:length] for length in range(1, 10)] * 3
    np.testing.assert_array_equal(embed_sentences(runner, others[:9] + [SENTENCES[0]] + others[9:])[9], alone)


@pytest.mark.parametrize("precision", REDUCED)
def test_switching_back_to_fp32_is_exact_again(precision):
    """A runner made to run in fp32 again from one that ran a reduced precision (and filled its token
    cache with that precision's rows) gives exact fp32's bits."""
    torch.manual_seed(7)
    bilm = random_bilm("tiny")
    exact = embed_sentences(bilm, SENTENCES)
    reduced = BiLMRunner(bilm, precision=precision)
    assert not np.array_equal(embed_sentences(reduced, SENTENCES)[0], exact[0])  # fills its token cache
    for want, got in zip(exact, embed_sentences(reduced.with_settings(precision="fp32"), SENTENCES), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("precision", REDUCED)
def test_copies_follow_weights_changed_in_place(precision):
    torch.manual_seed(8)
    bilm, fresh = random_bilm("tiny"), random_bilm("tiny")
    runner, fresh_runner = BiLMRunner(bilm, precision=precision), BiLMRunner(fresh, precision=precision)
    embed_sentences(runner, SENTENCES)  # caches bf16 or int8 copies of the old weights
    with torch.no_grad():
        for mine, theirs in zip(bilm.parameters(), fresh.parameters(), strict=True):
            mine.copy_(theirs)
    for want, got in zip(embed_sentences(fresh_runner, SENTENCES), embed_sentences(runner, SENTENCES), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("precision", REDUCED)
def test_unknown_precision_and_fused_reduced_precision_are_refused(precision):
    bilm = random_bilm("tiny")
    with pytest.raises(ValueError, match="precision must be one of .*'int8'.*got 'int4'"):
        BiLMRunner(bilm, precision="int4")
    with pytest.raises(ValueError, match=f"{precision} runs the step loop"):  # when it is made, not at a call
        BiLMRunner(bilm, precision=precision, lstm_path="fused")
    with pytest.raises(ValueError, match=f"{precision} runs the step loop"):
        BiLMRunner(bilm, precision=precision).with_settings(lstm_path="fused")


@pytest.mark.parametrize("precision", REDUCED)
def test_the_component_setting(tiny_weights, precision):
    exact = make_nlp(tiny_weights)("The bank raised its rates.")._.elmo_data
    reduced = make_nlp(tiny_weights, precision=precision)("The bank raised its rates.")._.elmo_data
    assert not np.array_equal(exact, reduced)
    assert cosines(exact, reduced).min() >= 0.999
    with pytest.raises(ValueError, match="precision must be one of"):
        make_nlp(tiny_weights, precision="fp8")


@pytest.mark.parametrize("precision", REDUCED)
def test_the_setting_travels_with_a_saved_pipeline(tiny_weights, tmp_path, precision):
    import spacy

    nlp = make_nlp(tiny_weights, precision=precision)
    expected = nlp("The bank raised its rates.")._.elmo_data
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("elmo").settings.precision == precision
    np.testing.assert_array_equal(loaded("The bank raised its rates.")._.elmo_data, expected)


def test_embed_takes_int8(tmp_path, tiny_weights):
    from spacy_elmo.corpus.output_folder import EmbeddedCorpus
    from spacy_elmo.pipeline.assembly import assemble_pipeline

    lines = ["The bank raised its rates.", "We sat on the bank of the river. It was warm."]
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    command = ["embed", tmp_path / "input.txt", tmp_path / "out", "--weights", tiny_weights]
    result = run_cli(*command, "--precision", "int8")
    assert result.returncode == 0, result.stdout + result.crash
    int8_nlp = assemble_pipeline(tiny_weights, elmo_config={"precision": "int8"})
    exact_nlp = assemble_pipeline(tiny_weights)
    with EmbeddedCorpus(tmp_path / "out") as output:
        for index, line in enumerate(lines):
            np.testing.assert_array_equal(output[index], int8_nlp(line)._.elmo_data)
            assert not np.array_equal(output[index], exact_nlp(line)._.elmo_data)
    refused = run_cli(*command, "--precision", "int4")
    assert refused.returncode == 1 and "'int8'" in refused.stdout and "got 'int4'" in refused.stdout


def test_quantize_rows_scales_each_row_alone_and_a_row_of_zeros_gives_zeros():
    x = torch.tensor(
        [[0.0, 0.0, 0.0, 0.0], [1.0, -2.0, 0.3, 4.0], [-254.0, 127.0, 0.0, 1.0], [1e-40, 0.0, -1e-40, 0.0]]
    )
    values, scale = quantized.quantize_rows(x)
    assert values.dtype == torch.int8 and scale.dtype == torch.float32
    torch.testing.assert_close(scale, torch.tensor([0.0, 4 / 127, 2.0, 0.0]), rtol=1e-6, atol=0)
    assert values[0].eq(0).all() and values[3].eq(0).all(), "rows of zeros (and subnormals) give zeros, not NaN"
    assert values.abs().amax(dim=1).tolist() == [0, 127, 127, 0], "each row spans the int8 range"
    error = (values[:3].float() * scale[:3, None] - x[:3]).abs()
    assert (error <= scale[:3, None] / 2 * (1 + 1e-6)).all(), "rounded to nearest"
    assert torch.equal(quantized.quantize_rows(x[1:2])[0], values[1:2]), "a row's scale is its own"


def test_int8_linear_is_within_the_quantization_bound_and_rows_are_independent():
    generator = torch.Generator().manual_seed(3)
    weight = torch.nn.Parameter(torch.randn(37, 300, generator=generator), requires_grad=False)
    bias = torch.randn(37, generator=generator)
    x = torch.randn(20, 300, generator=generator) * torch.rand(20, 1, generator=generator) * 10
    x[4] = 0  # a padding row
    got = quantized.linear(x, weight, HERE, bias)
    assert got.dtype == torch.float32 and got.shape == (20, 37) and got.is_contiguous()
    assert torch.equal(got[4], bias), "a row of zeros gives the bias alone"
    # |x.w - x^.w^| <= s_x / 2 * |w|_1 + s_w / 2 * |x^|_1 (x^, w^: the dequantized operands)
    x_values, x_scale = quantized.quantize_rows(x)
    w_values, w_scale = quantized.quantize_rows(weight)
    x_hat = x_values.double() * x_scale.double()[:, None]
    bound = (
        x_scale.double()[:, None] / 2 * weight.double().abs().sum(1)
        + w_scale.double() / 2 * x_hat.abs().sum(1)[:, None]
    )
    rounding = 1e-6 * (x.double().abs() @ weight.double().abs().t())  # fp32 dequantization
    error = (got.double() - (x.double() @ weight.double().t() + bias.double())).abs()
    assert error.max() > 0 and (error <= bound + rounding).all()
    for rows in (slice(0, 1), slice(3, 5), slice(7, 20)):  # alone or with other companions: same bits
        assert torch.equal(quantized.linear(x[rows], weight, HERE, bias), got[rows])


def test_two_int8_terms_keep_about_15_bits_of_each_row_and_rows_stay_independent():
    """``quantize_rows_twice``: the second term quantizes what the first left, so a value is within
    half a step of the second term's scale, at most 1/254 of the first's; a row alone gets the bits
    it gets among others; a row of zeros stays zeros. Through ``linear``: closer to the exact
    product than one term, with the same rows alone or together."""
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(12, 200, generator=generator) * torch.rand(12, 1, generator=generator) * 10
    x[5] = 0
    values, (coarse, residual) = quantized.quantize_rows_twice(x)
    assert values.shape == (24, 200) and values.dtype == torch.int8
    approximation = values[:12].float() * coarse[:, None] + values[12:].float() * residual[:, None]
    error = (approximation - x).abs()
    assert error.max() > 0 and (error <= residual[:, None] / 2 * (1 + 1e-6) + 1e-6 * x.abs()).all()
    assert (residual <= coarse / 254 * (1 + 1e-6)).all(), "the residual's scale is at most half a coarse step / 127"
    assert values[5].eq(0).all() and values[17].eq(0).all() and coarse[5] == 0 and residual[5] == 0
    alone, (coarse_alone, residual_alone) = quantized.quantize_rows_twice(x[3:4])
    assert torch.equal(alone, values[[3, 15]]) and coarse_alone == coarse[3] and residual_alone == residual[3]
    weight = torch.nn.Parameter(torch.randn(30, 200, generator=generator), requires_grad=False)
    exact = x.double() @ weight.double().t()
    one, two = (quantized.linear(x, weight, HERE, None, fine) for fine in (False, True))
    assert (two.double() - exact).abs().max() < (one.double() - exact).abs().max()
    for rows in (slice(0, 1), slice(4, 7)):
        assert torch.equal(quantized.linear(x[rows], weight, HERE, None, True), two[rows])


def levels_weight(kernel, values, scale):
    """A ``QuantizedWeight`` of the int8 ``values`` (N, K) and ``scale`` (N,) in ``kernel``'s layout,
    as ``quantized.quantize_weight`` lays them out (oneDNN's copy at any size)."""
    if kernel.name == "onednn":
        return quantized.QuantizedWeight("onednn", scale, onednn=quantized._prepack(values, scale))
    if kernel.name == "fp32_sums":
        return quantized.QuantizedWeight("fp32_sums", scale, blocks=quantized.fp32_blocks(values.float()))
    return quantized.QuantizedWeight("int_mm", scale, values_t=values.contiguous().t())


def exact_here(name):
    """``INT8_KERNELS[name]`` as a parameter, skipped where its probe finds its sums inexact here."""
    kernel = quantized.INT8_KERNELS[name]
    skip = not quantized.sums_exact(kernel) and not int8_kernel_should_be_exact(kernel.needs)
    inexact = pytest.mark.skipif(
        skip, reason=f"{name}'s int8 sums are not exact here, and this CPU lacks {kernel.needs}"
    )
    return pytest.param(kernel, id=name, marks=inexact)


EVERY_KERNEL = [exact_here(name) for name in quantized.INT8_KERNELS]


@pytest.mark.parametrize("kernel", EVERY_KERNEL)
def test_int8_sums_are_exact_integers_for_any_shape(kernel):
    """127 levels on every kernel: exact integer sums (converted to fp32 as ``Tensor.to`` rounds),
    with no int16 saturation of pair sums (AVX2 without VNNI would saturate them)."""
    generator = torch.Generator().manual_seed(4)
    for rows, inner, columns in ((1, 7, 5), (3, 13, 24), (33, 4096, 8), (5, 1100, 64)):
        a = torch.randint(-127, 128, (rows, inner), dtype=torch.int8, generator=generator)
        b = torch.randint(-127, 128, (columns, inner), dtype=torch.int8, generator=generator)
        exact = (a.long() @ b.long().t()).to(torch.float32)
        assert torch.equal(quantized.channel_scaled_sums(a, levels_weight(kernel, b, torch.ones(columns))), exact)
    extreme, weight = torch.full((2, 4096), -127, dtype=torch.int8), torch.full((2, 4096), -127, dtype=torch.int8)
    sums = quantized.channel_scaled_sums(extreme, levels_weight(kernel, weight, torch.ones(2)))
    assert sums.eq(4096 * 127 * 127).all(), "no int16 saturation"
    too_long = torch.nn.Parameter(torch.ones(2, quantized.MAX_K + 1), requires_grad=False)
    with pytest.raises(ValueError, match="could overflow int32 .* use precision 'bf16' or 'fp32'"):
        quantized.linear(torch.ones(1, quantized.MAX_K + 1), too_long, kernel)


LAYOUTS = [False] + ([True] if quantized.onednn_fp32_runs() else [])


@pytest.mark.parametrize("onednn", LAYOUTS, ids=lambda onednn: "onednn" if onednn else "torch.mm")
def test_fp32_sums_are_exact_for_sums_longer_than_fp32_exact_k(onednn):
    """fp32 GEMMs (torch.mm, and oneDNN where probed exact) hold int8 sums exactly up to
    FP32_EXACT_K products (below 2**24 in any order); past it the blocks add in int32: still the
    int64 sums, converted to fp32 as ``Tensor.to`` rounds them past 2**24, and each row the same
    whatever rows are beside it."""
    block = quantized.FP32_EXACT_K
    assert block * 127 * 127 < 2**24
    generator = torch.Generator().manual_seed(9)
    rounded = False
    for inner in (block - 1, block, block + 1, 2 * block + 3, 4099):
        a = torch.randint(-127, 128, (40, inner), dtype=torch.int8, generator=generator)
        b = torch.randint(-127, 128, (inner, 24), dtype=torch.int8, generator=generator)
        a[0], b[:, 0], a[1], b[:, 1] = 127, 127, 127, 127
        b[::3, 1] = 126  # a sum past 2**24 that fp32 cannot hold: it must round as Tensor.to rounds
        sums = a.long() @ b.long()
        expected = sums.to(torch.float32)
        rounded = rounded or bool((expected.long() != sums).any())
        blocks = quantized.fp32_blocks(b.float().t(), onednn)
        got = quantized.fp32_sums(a, blocks, onednn)
        assert got.dtype == torch.float32 and torch.equal(got, expected), inner
        for rows in (slice(0, 1), slice(1, 3), slice(5, 22)):
            assert torch.equal(quantized.fp32_sums(a[rows], blocks, onednn), expected[rows])
    assert rounded, "some sums were past what fp32 holds exactly"


@pytest.mark.parametrize("kernel", EVERY_KERNEL)
def test_every_exact_int8_kernel_gives_the_bits_of_fp32_sums(kernel):
    """Which kernel runs changes the speed, never the numbers: random operands, a padding row, and
    a weight with K > FP32_EXACT_K (summed in several fp32 blocks by fp32_sums)."""
    generator = torch.Generator().manual_seed(6)
    for inner in (300, 2500):
        x = torch.randn(21, inner, generator=generator) * torch.rand(21, 1, generator=generator) * 5
        x[7] = 0
        bias = torch.randn(80, generator=generator)
        weight = torch.nn.Parameter(torch.randn(80, inner, generator=generator), requires_grad=False)
        for fine in (False, True):  # one int8 term per row, or two (the char CNN's and projection's inputs)
            through_kernel = quantized.linear(x, weight, kernel, bias, fine)
            reference = quantized.linear(x, weight, FP32_SUMS, bias, fine)
            assert torch.equal(through_kernel, reference), (kernel.name, inner, fine)
            for rows in (slice(0, 1), slice(6, 9), slice(2, 21)):
                assert torch.equal(quantized.linear(x[rows], weight, kernel, bias, fine), reference[rows])
        copy = quantized.quantized_weight(weight, kernel)
        assert copy.kernel == kernel.name and (copy.onednn is not None) == (kernel.name == "onednn"), "its own copy"


@pytest.mark.parametrize("kernel", EVERY_KERNEL)
@pytest.mark.parametrize("shape", [(16, 24), (64, 96)])
def test_int8_copies_are_made_once_in_their_kernels_layout(shape, kernel):
    """oneDNN (K and N of 64 or more) and torch._int_mm keep int8 levels, a quarter of fp32's size;
    fp32_sums keeps the same levels as fp32 operands in K blocks of FP32_EXACT_K (in oneDNN's layout
    where this torch has it). Made once, remade when the weight changes."""
    weight = torch.nn.Parameter(torch.randn(*shape), requires_grad=False)
    packed = quantized.quantized_weight(weight, kernel)
    values, scale = quantized.quantize_rows(weight)
    if kernel.name == "onednn" and min(shape) >= 64:
        assert packed.kernel == "onednn" and packed.values_t is None, "one int8 copy only"
        assert packed.onednn[0].dtype == torch.int8 and packed.onednn[0].numel() == weight.numel()
    elif kernel.name == "fp32_sums":
        assert packed.values_t is None and packed.onednn is None, "one copy: the fp32 blocks"
        assert len(packed.blocks) == -(-shape[1] // quantized.FP32_EXACT_K)
        assert all(block.dtype == torch.float32 for block in packed.blocks)
        levels = torch.randint(-127, 128, (3, shape[1]), dtype=torch.int8)
        assert torch.equal(quantized.channel_scaled_sums(levels, packed), (levels.long() @ values.long().t()) * scale)
    else:
        assert packed.onednn is None and packed.kernel == "int_mm", "small weights go to torch._int_mm"
        assert packed.values_t.dtype == torch.int8 and packed.values_t.shape == shape[::-1]
        assert packed.values_t.t().is_contiguous(), "column-major, the layout _int_mm is fastest with"
        assert torch.equal(packed.values_t.t(), values), "the int8 levels themselves"
    assert quantized.quantized_weight(weight, kernel) is packed
    chunked = quantized._quantize_in_chunks(weight, rows=5)  # how weights are quantized: a block of rows at a time
    assert torch.equal(chunked[0], values) and torch.equal(chunked[1], scale) and torch.equal(packed.scale, scale)
    with torch.no_grad():
        weight.mul_(2)
    assert quantized.quantized_weight(weight, kernel) is not packed
    torch.testing.assert_close(quantized.quantized_weight(weight, kernel).scale, packed.scale * 2)


@pytest.mark.parametrize("kernel", EVERY_KERNEL)
def test_int8_sums_are_exact_for_any_row_count(kernel):
    generator = torch.Generator().manual_seed(5)
    for inner, columns in ((7, 5), (112, 64), (4096, 24)):
        a = torch.randint(-127, 128, (70, inner), dtype=torch.int8, generator=generator)
        b = torch.randint(-127, 128, (columns, inner), dtype=torch.int8, generator=generator)
        a[0], b[0] = -127, -127  # a sum past 2**24 for K = 4096: converted as Tensor.to rounds
        scale = torch.rand(columns, generator=generator)
        weight = levels_weight(kernel, b, scale)
        expected = (a.long() @ b.long().t()).to(torch.float32) * scale
        for rows in (slice(0, 1), slice(0, 2), slice(5, 38), slice(0, 70)):
            assert torch.equal(quantized.channel_scaled_sums(a[rows], weight), expected[rows])
    assert quantized.channel_scaled_sums(a[:0], weight).shape == (0, 24)


def test_the_rule_picks_the_first_exact_kernel_the_features_allow():
    """oneDNN on AMX, torch._int_mm on VNNI, fp32 GEMMs on every CPU: in that order, each only
    where its probe passes; fp32_sums needs no feature."""
    from spacy_elmo.kernels import machine

    features = machine.cpu_features()
    allowed = quantized.exact_int8_kernels(CPU, features)
    assert [kernel.name for kernel in allowed] == [
        kernel.name
        for kernel in quantized.INT8_KERNELS.values()
        if quantized.sums_exact(kernel) and (not kernel.needs or any(name in features for name in kernel.needs))
    ]
    assert quantized.exact_int8_kernels(CPU, frozenset()) == ((FP32_SUMS,) if quantized.sums_exact(FP32_SUMS) else ())
    chosen = select(CPU, "int8")
    if allowed:
        assert chosen.int8 == allowed[0] and chosen.runs == "int8"
        assert (chosen.choice.slower is not None) == (chosen.int8 is FP32_SUMS)
    else:
        assert chosen.int8 is None and chosen.choice.fell_back


def test_operand_sends_int8_to_the_quantized_path():
    from spacy_elmo.kernels.precision import operand

    with pytest.raises(ValueError, match="run int8 through quantized.linear"):
        operand(torch.ones(2, 2), "int8")


@needs_cuda
def test_int8_on_cuda_pads_to_the_shapes_cublas_takes():
    on_cuda = select(torch.device("cuda"), "int8")
    assert on_cuda.int8 is quantized.INT8_KERNELS["int_mm"] and on_cuda.runs == "int8"
    kernel = on_cuda.int8
    generator = torch.Generator().manual_seed(5)
    weight = torch.randn(13, 21, generator=generator)
    x = torch.randn(5, 21, generator=generator)
    on_cpu = quantized.linear(x, torch.nn.Parameter(weight, requires_grad=False), HERE)
    cuda_weight = torch.nn.Parameter(weight.cuda(), requires_grad=False)
    on_gpu = quantized.linear(x.cuda(), cuda_weight, kernel)
    assert on_gpu.shape == (5, 13)
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=1e-6, atol=1e-6)
    a, _ = quantized.quantize_rows(x.cuda())
    packed = quantized.quantized_weight(cuda_weight, kernel)
    assert packed.values_t.shape == (24, 16), "K and N padded to multiples of 8"
    exact = quantized.quantize_rows(x)[0].long() @ quantized.quantize_rows(weight)[0].long().t()
    assert torch.equal(quantized.int_mm(a, packed.values_t)[:, :13].cpu().long(), exact)
    for rows in (slice(0, 1), slice(2, 5)):
        assert torch.equal(quantized.linear(x[rows].cuda(), cuda_weight, kernel), on_gpu[rows])


@needs_cuda
def test_int8_results_do_not_depend_on_batch_companions_on_cuda():
    torch.manual_seed(6)
    runner = BiLMRunner(random_bilm("tiny").cuda(), precision="int8")
    batch = SENTENCES + [SENTENCES[1][: 1 + k % 9] for k in range(40)]
    together = embed_sentences(runner, batch)
    for sentence, layers in zip(SENTENCES, together[: len(SENTENCES)], strict=True):
        np.testing.assert_array_equal(embed_sentences(runner, [sentence])[0], layers)
