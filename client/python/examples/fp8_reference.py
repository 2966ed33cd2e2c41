"""A reference for block-scaled FP8 in torch, written apart from refit's C++ quantizer, to
check what refit writes into FP8 destinations: per block of `block` elements over the last
two dims, amax = max |x| in float32 (at least 1e-4), code = the E4M3 value nearest to
x * (448 / amax) (float32 product; ties to the code with an even mantissa; beyond 448,
448), scale = amax / 448. E4M3 codes are found by search over the 127 non-negative finite
code values (torch 1.x has no float8 dtype), as uint8 bytes."""
import torch


def _e4m3_values():
    """The value of every non-negative finite E4M3 code, 0x00 .. 0x7E, ascending."""
    values = []
    for code in range(0x7F):
        exponent, mantissa = code >> 3, code & 7
        values.append(mantissa / 8 * 2.0 ** -6 if exponent == 0
                      else (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    return torch.tensor(values, dtype=torch.float64)


_VALUES = _e4m3_values()


def e4m3_codes(y):
    """The E4M3 code (uint8) of every element of the float32 tensor `y`."""
    a = y.abs().double()
    high = torch.searchsorted(_VALUES, a.contiguous()).clamp(max=0x7E)
    low = (high - 1).clamp(min=0)
    below, above = a - _VALUES[low], _VALUES[high] - a
    code = torch.where((above < below) | ((above == below) & (high % 2 == 0)), high, low)
    code = torch.where(torch.isnan(y), torch.full_like(code, 0x7F), code)
    return (code | (torch.signbit(y).long() << 7)).to(torch.uint8)


def quantize_blocks(x, block):
    """Codes (uint8, shaped like x) and scales (float32, one per block) of the float32
    matrix `x` in blocks of `block` = (rows, cols)."""
    rows, cols = x.shape
    block_rows, block_cols = block
    grid = ((rows + block_rows - 1) // block_rows, (cols + block_cols - 1) // block_cols)
    codes = torch.empty(rows, cols, dtype=torch.uint8)
    scales = torch.empty(grid, dtype=torch.float32)
    limit = torch.tensor(448.0, dtype=torch.float32)
    for i in range(grid[0]):
        for j in range(grid[1]):
            part = (slice(i * block_rows, (i + 1) * block_rows),
                    slice(j * block_cols, (j + 1) * block_cols))
            values = x[part].float()
            amax = torch.nan_to_num(values.abs(), nan=0.0).max().clamp(min=1e-4)
            codes[part] = e4m3_codes(values * (limit / amax))
            scales[i, j] = amax / limit
    return codes, scales
