"""Sizes of the later evaluation families' variants (`families`).

Each tuple is one variant's size, in the order its family's function in
`eval_variants` documents. The sizes were chosen before any placement of the
family, by one-device peak memory only: some fit one device easily, some
barely, some not at all.
"""

GAN_SIZES = ((64, 64, 64), (128, 64, 128), (128, 128, 512), (256, 64, 256))
DETECTOR_SIZES = ((256, 32, 8), (512, 64, 32), (640, 64, 32), (512, 96, 48))
MOE_SIZES = ((4, 512, 8, 128, 32), (6, 768, 8, 256, 16), (8, 1024, 16, 512, 16),
             (12, 768, 8, 512, 16))
GNN_SIZES = ((5, 64, 64, 128), (5, 256, 256, 64), (8, 512, 512, 64),
             (12, 1024, 1024, 48))
KERAS3_APPLICATIONS = (("InceptionV3", 299, 32), ("ConvNeXtSmall", 224, 64))
KERAS3_DECODERS = ((8, 768, 12, 512, 16), (6, 1024, 16, 1024, 16))
DUAL_ENCODER_SIZES = ((6, 6, 512, 64, 64), (12, 12, 768, 77, 32),
                      (12, 12, 768, 77, 96), (8, 6, 512, 77, 256))
PERCEIVER_SIZES = ((128, 512, 4, 2, 32), (256, 768, 6, 2, 24),
                   (256, 768, 6, 2, 64), (256, 1024, 6, 4, 40))
# Point clouds: (task, points, batch), by one-device peak memory only.
POINTNET_SIZES = (("cls", 1024, 32), ("cls", 2048, 128), ("seg", 2048, 32),
                  ("seg", 4096, 96))
# Swin: (embed dim, depths, heads, image size, batch), by one-device peak
# memory only.
SWIN_SIZES = ((96, (2, 2, 6, 2), (3, 6, 12, 24), 224, 16),
              (96, (2, 2, 6, 2), (3, 6, 12, 24), 224, 64),
              (96, (2, 2, 18, 2), (3, 6, 12, 24), 224, 32),
              (128, (2, 2, 18, 2), (4, 8, 16, 32), 224, 64))
# Conformer: (model width, blocks, heads, frames, batch), by one-device peak
# memory only.
CONFORMER_SIZES = ((144, 10, 4, 800, 32), (256, 12, 4, 800, 32),
                   (256, 12, 4, 1000, 48), (512, 13, 8, 1000, 48))
# HRNet: (width W, image height, image width, batch), by one-device peak
# memory only.
HRNET_SIZES = ((18, 256, 192, 16), (32, 256, 192, 32), (32, 256, 192, 48),
               (32, 384, 288, 48))
# Diffusion: (base channels, level multipliers, attention sides, image size,
# batch), by one-device peak memory only.
DIFFUSION_SIZES = ((64, (1, 2, 2, 2), (16,), 32, 48),
                   (128, (1, 2, 2, 2), (16,), 32, 64),
                   (96, (1, 2, 3, 4), (16,), 64, 36),
                   (128, (1, 2, 3, 4), (16,), 64, 56))
# MobileViT: (model, image size, batch), by one-device peak memory only; a
# model's 7 channel widths, 3 transformer widths and expansion, as in the
# paper's XXS, XS and S.
MOBILEVIT_WIDTHS = {
    "xxs": ((16, 16, 24, 48, 64, 80, 320), (64, 80, 96), 2),
    "xs": ((16, 32, 48, 64, 80, 96, 384), (96, 120, 144), 4),
    "s": ((16, 32, 64, 96, 128, 160, 640), (144, 192, 240), 4),
}
MOBILEVIT_SIZES = (("xxs", 256, 32), ("xs", 256, 32), ("s", 256, 44),
                   ("s", 320, 64))
# DeepLabV3+: (backbone depth, image size, batch), by one-device peak memory
# only; a depth's bottleneck blocks per stage, as in ResNet-50 and -101.
DEEPLAB_BACKBONES = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}
DEEPLAB_SIZES = ((50, 256, 6), (50, 384, 10), (101, 448, 10),
                 (101, 512, 20))
# Captioner: (encoder layers, width, decoder layers, image size, caption
# length, batch), by one-device peak memory only; a ResNet-18 encoder.
CAPTIONER_SIZES = ((0, 512, 6, 224, 32, 36), (2, 512, 6, 224, 32, 108),
                   (0, 768, 8, 288, 48, 92), (2, 1024, 6, 384, 64, 124))
# LLaMA: (layers, hidden, query heads, key/value heads, sequence length,
# batch), by one-device peak memory only.
LLAMA_SIZES = ((8, 512, 8, 2, 512, 4), (12, 768, 12, 4, 1024, 3),
               (16, 1024, 16, 8, 512, 4), (24, 1280, 10, 2, 2048, 1))
# EDSR: (residual blocks, feature maps, scale, low-resolution patch side,
# batch), by one-device peak memory only.
EDSR_SIZES = ((16, 64, 4, 64, 44), (32, 128, 3, 64, 48), (32, 256, 2, 96, 16),
              (32, 256, 4, 96, 28))
# ConvS2S: (encoder blocks, decoder blocks, convolution width, source =
# target length, batch), by one-device peak memory only.
CONVS2S_SIZES = ((8, 8, 512, 64, 64), (12, 16, 768, 96, 72),
                 (20, 20, 1024, 128, 64), (16, 20, 1024, 128, 160))
# Tacotron 2: (text length, mel frames, batch), by one-device peak memory
# only.
TACOTRON_SIZES = ((40, 28, 16), (80, 88, 64), (120, 120, 224),
                  (150, 130, 512))
# Mamba: (layers, model width, sequence length, batch), by one-device peak
# memory only.
MAMBA_SIZES = ((6, 512, 256, 2), (12, 768, 512, 1), (16, 1024, 512, 1),
               (22, 1024, 256, 3))
# VQ-VAE: (image size, residual width, residual blocks per stack, codebook
# size, batch), by one-device peak memory only.
VQVAE_SIZES = ((128, 128, 10, 512, 112), (128, 256, 16, 1024, 96),
               (256, 128, 24, 2048, 68), (256, 256, 32, 4096, 45))
# Gated PixelCNN: (image size, channels, maps per stack, layers, batch), by
# one-device peak memory only.
PIXELCNN_SIZES = ((32, 3, 128, 8, 72), (32, 3, 192, 15, 72),
                  (64, 3, 128, 24, 32), (64, 3, 192, 29, 32))
# Stacked Hourglass: (image size, stacks, features, keypoints, batch), by
# one-device peak memory only.
HOURGLASS_SIZES = ((128, 2, 128, 16, 71), (256, 2, 256, 16, 30),
                   (256, 3, 128, 16, 66), (256, 4, 256, 16, 59))
# NeRF: (rays, coarse samples, fine samples, MLP width, MLP depth, levels),
# by one-device peak memory only.
NERF_SIZES = ((1280, 64, 128, 256, 8, 2), (3456, 64, 128, 256, 8, 2),
              (6144, 64, 128, 256, 8, 2), (6784, 64, 128, 256, 8, 3))
# Glow: (image size, levels, flow steps per level, coupling width, batch),
# by one-device peak memory only.
GLOW_SIZES = ((32, 3, 8, 512, 240), (64, 4, 8, 512, 166),
              (128, 5, 6, 512, 98), (256, 6, 6, 512, 46))
