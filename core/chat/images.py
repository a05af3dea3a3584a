"""An image as a vision model gets it: decoded with Pillow under a pixel guard, turned
upright, resized under `[media] max_image_pixels` and re-encoded as JPEG until what it adds
to a request (its data URL and JSON) fits `[media] max_image_bytes`.

Pure functions on bytes (no I/O): the caller runs `image_part` in a worker thread.
"""

from __future__ import annotations

import base64
import io
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.config import MediaConfig
from core.errors import ImageRejected

if TYPE_CHECKING:  # Pillow is imported on the first image, not with the turn loop
    from PIL.Image import Image as Picture

DATA_URL_PREFIX = "data:image/jpeg;base64,"
QUALITY_STEPS = (0, 10, 25, 40)  # subtracted from `jpeg_quality` before shrinking further
SHRINK = 0.75  # each further step's side length, when no quality fits
MAX_SHRINKS = 8
# What an image adds to a request besides its data URL: the part's own JSON and the text
# part its message's content becomes. Counted in, so a request grows by at most the cap.
ENVELOPE_BYTES = 100
# What an image costs in the model's context, when `[media] image_tokens` does not say: one
# token per 28×28-pixel patch (Qwen2-VL and Qwen2.5-VL, the common local vision models, merge
# 14-pixel patches 2×2), plus the markers around it. Models with a fixed cost per image
# (LLaVA 576, Gemma 3 256) are set with `image_tokens`.
PATCH_PIXELS = 28
IMAGE_MARKER_TOKENS = 2
MIN_IMAGE_TOKENS = 64  # an image shrunk below this (~220×220 pixels) is no use: left out


@dataclass(frozen=True)
class ImagePart:
    """One image ready for a request: its data URL and what it became."""

    url: str
    width: int
    height: int

    def to_openai(self) -> dict[str, object]:
        return {"type": "image_url", "image_url": {"url": self.url}}


def image_tokens(part: ImagePart, fixed: int = 0) -> int:
    """The tokens `part` is planned at: `fixed` (`[media] image_tokens`) when set, else one
    per 28-pixel patch of its size."""
    if fixed:
        return fixed
    patches = math.ceil(part.width / PATCH_PIXELS) * math.ceil(part.height / PATCH_PIXELS)
    return patches + IMAGE_MARKER_TOKENS


def shrunk_to_tokens(part: ImagePart, tokens: int, caps: MediaConfig) -> ImagePart | None:
    """`part` re-encoded small enough to cost at most `tokens` (by its patches); None when
    that is under `MIN_IMAGE_TOKENS` (too small to be of use)."""
    if tokens < MIN_IMAGE_TOKENS:
        return None
    if image_tokens(part) <= tokens:
        return part
    # Patches are whole: aim at a side a patch shorter than the exact fit.
    pixels = (tokens - IMAGE_MARKER_TOKENS) * PATCH_PIXELS**2
    scale = math.sqrt(pixels / (part.width * part.height))
    width = max(1, int(part.width * scale) - PATCH_PIXELS)
    height = max(1, int(part.height * scale) - PATCH_PIXELS)
    data = base64.b64decode(part.url.removeprefix(DATA_URL_PREFIX))
    smaller = image_part(data, caps.model_copy(update={"max_image_pixels": width * height}))
    return smaller if image_tokens(smaller) <= tokens else None


def image_part(data: bytes, caps: MediaConfig) -> ImagePart:
    """`data` (any format Pillow reads) as a JPEG data URL within the caps; `ImageRejected`
    says why not (not an image, too large to decode, cannot fit)."""
    from PIL import Image

    picture = _decoded(data, caps.max_source_pixels)
    picture = _fitted(picture, caps.max_image_pixels)
    for _ in range(MAX_SHRINKS):
        for step in QUALITY_STEPS:
            url = _data_url(picture, max(30, caps.jpeg_quality - step))
            if len(url) + ENVELOPE_BYTES <= caps.max_image_bytes:
                return ImagePart(url, picture.width, picture.height)
        size = (max(1, int(picture.width * SHRINK)), max(1, int(picture.height * SHRINK)))
        picture = picture.resize(size, Image.Resampling.LANCZOS)
    raise ImageRejected(f"the image cannot be made to fit {caps.max_image_bytes:,} bytes")


def _decoded(data: bytes, max_source_pixels: int) -> Picture:
    """The image decoded, upright, in RGB (transparency on white). Its header is read first:
    one over `max_source_pixels` is refused before a pixel is decoded."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            opened = Image.open(io.BytesIO(data))
            width, height = opened.size
            if width * height > max_source_pixels:
                raise ImageRejected(
                    f"the image is too large to decode ({width}×{height} pixels; the limit"
                    f" is {max_source_pixels:,})"
                )
            opened.draft("RGB", (width, height))
            opened.load()
            upright = ImageOps.exif_transpose(opened)
    except ImageRejected:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageRejected("the image is too large to decode (a decompression bomb?)") from None
    except UnidentifiedImageError:
        raise ImageRejected("the file is not an image I can read") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageRejected(f"the image is damaged or unreadable ({exc})") from None
    return _rgb(upright)


def _rgb(picture: Picture) -> Picture:
    from PIL import Image

    if picture.mode in ("RGBA", "LA") or (picture.mode == "P" and "transparency" in picture.info):
        rgba = picture.convert("RGBA")
        flat = Image.new("RGB", rgba.size, (255, 255, 255))
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return flat
    return picture.convert("RGB")


def _fitted(picture: Picture, max_pixels: int) -> Picture:
    """`picture` scaled down (never up) to at most `max_pixels` pixels, aspect kept."""
    from PIL import Image

    pixels = picture.width * picture.height
    if pixels <= max_pixels:
        return picture
    scale = math.sqrt(max_pixels / pixels)
    size = (max(1, int(picture.width * scale)), max(1, int(picture.height * scale)))
    return picture.resize(size, Image.Resampling.LANCZOS)


def _data_url(picture: Picture, quality: int) -> str:
    buffer = io.BytesIO()
    picture.save(buffer, "JPEG", quality=quality, optimize=True)
    return DATA_URL_PREFIX + base64.b64encode(buffer.getvalue()).decode("ascii")
