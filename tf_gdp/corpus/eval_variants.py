"""Names and builder arguments of the evaluation families' variants.

Each function maps a family's sizes to (variant name, builder arguments)
pairs, which `families` turns into its `Variant`s. They live apart from the
table so that the table stays one readable module as families are added.
"""

# Rows per categorical feature of a click log: a few features with millions
# of values, many with tens to thousands. A variant hashes each into at most
# `max_rows` rows.
_CLICK_LOG_ROWS = (
    1_500, 600, 10_000_000, 2_200_000, 300, 24, 12_500, 650, 3, 93_000,
    5_700, 8_400_000, 3_200, 27, 15_000, 5_500_000, 10, 5_700, 2_200, 4,
    7_000_000, 18, 15, 290_000, 105, 140_000)


def translations(sizes):
  """(encoder layers, decoder layers, hidden, heads, source = target
  length, batch) per variant."""
  return [(f"translation_e{enc}_d{dec}_h{hidden}_s{seq}_b{batch}",
           dict(encoder_layers=enc, decoder_layers=dec, hidden=hidden,
                heads=heads, source_seq=seq, target_seq=seq, batch=batch))
          for enc, dec, hidden, heads, seq, batch in sizes]


def acoustic_models(sizes):
  """(bidirectional GRU layers, hidden, frames, batch) per variant."""
  return [(f"speech_l{layers}_h{hidden}_f{frames}_b{batch}",
           dict(layers=layers, hidden=hidden, frames=frames, batch=batch))
          for layers, hidden, frames, batch in sizes]


def video_classifiers(sizes):
  """(blocks per stage, frames, image size, batch) per variant."""
  return [(f"r2plus1d_k{blocks}_t{frames}_i{image}_b{batch}",
           dict(blocks=blocks, frames=frames, image_size=image, batch=batch))
          for blocks, frames, image, batch in sizes]


def point_clouds(sizes):
  """(task, points, batch) per variant; task "cls" (40 classes per cloud)
  or "seg" (50 part labels per point)."""
  return [(f"pointnet_{task}_n{points}_b{batch}",
           dict(points=points, batch=batch, segment=task == "seg",
                classes=50 if task == "seg" else 40))
          for task, points, batch in sizes]


def swins(sizes):
  """(embed dim, depths per stage, heads per stage, image size, batch) per
  variant; 4x4 patches, 7x7 windows, 1000 classes."""
  return [(f"swin_c{embed}_d{sum(depths)}_i{image}_b{batch}",
           dict(image_size=image, embed_dim=embed, depths=depths, heads=heads,
                window=7, batch=batch))
          for embed, depths, heads, image, batch in sizes]


def conformers(sizes):
  """(model width, blocks, heads, frames, batch) per variant; 80 log-mel
  bins, depthwise kernel 31, 256 subword units and a blank."""
  return [(f"conformer_d{width}_l{blocks}_f{frames}_b{batch}",
           dict(d_model=width, blocks=blocks, heads=heads, frames=frames,
                batch=batch))
          for width, blocks, heads, frames, batch in sizes]


def hrnets(sizes):
  """(width W, image height, image width, batch) per variant; HRNet's
  modules (1, 4, 3) and 4 blocks per branch, 17 keypoints."""
  return [(f"hrnet_w{width}_i{height}x{image_width}_b{batch}",
           dict(width=width, image_size=(height, image_width), batch=batch))
          for width, height, image_width, batch in sizes]


def diffusions(sizes):
  """(base channels, level multipliers, attention sides, image size,
  batch) per variant; 2 residual blocks per level, one attention head."""
  return [(f"diffusion_c{channels}_i{image}_b{batch}",
           dict(channels=channels, multipliers=multipliers,
                attention=attention, image_size=image, batch=batch))
          for channels, multipliers, attention, image, batch in sizes]


def mobilevits(sizes, widths):
  """(model, image size, batch) per variant, the model one of `widths`:
  its 7 channel widths, 3 transformer widths and the inverted residual
  blocks' expansion. Transformer depths 2, 4, 3, 4 heads, 1000 classes."""
  return [(f"mobilevit_{model}_i{image}_b{batch}",
           dict(channels=widths[model][0], dims=widths[model][1],
                expansion=widths[model][2], image_size=image, batch=batch))
          for model, image, batch in sizes]


def deeplabs(sizes, backbones):
  """(backbone depth, image size, batch) per variant, the depth one of
  `backbones`: its bottleneck blocks per stage. Pyramid and decoder of 256
  channels, a 48-channel low-level projection, 21 classes."""
  return [(f"deeplab_r{depth}_i{image}_b{batch}",
           dict(blocks=backbones[depth], image_size=image, batch=batch))
          for depth, image, batch in sizes]


def captioners(sizes):
  """(encoder layers, width, decoder layers, image size, caption length,
  batch) per variant; a ResNet-18 image encoder, heads of 64 channels,
  10,000 words."""
  return [(f"captioner_e{encoder}_d{width}_l{decoder}_i{image}_t{length}"
           f"_b{batch}",
           dict(encoder_layers=encoder, width=width, heads=width // 64,
                decoder_layers=decoder, image_size=image,
                caption_length=length, batch=batch))
          for encoder, width, decoder, image, length, batch in sizes]


def llamas(sizes):
  """(layers, hidden, query heads, key/value heads, sequence length, batch)
  per variant; SwiGLU of LLaMA's width, 32,000 tokens."""
  return [(f"llama_l{layers}_h{hidden}_q{heads}_kv{kv_heads}_s{seq}"
           f"_b{batch}",
           dict(layers=layers, hidden=hidden, heads=heads,
                kv_heads=kv_heads, seq=seq, batch=batch))
          for layers, hidden, heads, kv_heads, seq, batch in sizes]


def edsrs(sizes):
  """(residual blocks, feature maps, scale, low-resolution patch side, batch)
  per variant; residuals scaled by 0.1 from 256 feature maps on."""
  return [(f"edsr_r{blocks}_f{features}_x{scale}_p{patch}_b{batch}",
           dict(blocks=blocks, features=features, scale=scale, patch=patch,
                batch=batch))
          for blocks, features, scale, patch, batch in sizes]


def convs2s_models(sizes):
  """(encoder blocks, decoder blocks, convolution width, source = target
  length, batch) per variant; 512-wide embeddings, 32,000 tokens."""
  return [(f"convs2s_e{enc}_d{dec}_w{width}_s{seq}_b{batch}",
           dict(encoder_blocks=enc, decoder_blocks=dec, width=width, seq=seq,
                batch=batch))
          for enc, dec, width, seq, batch in sizes]


def tacotrons(sizes):
  """(text length, mel frames, batch) per variant; Tacotron 2's widths
  (512-wide encoder, 1024-unit decoder LSTMs, 80 mel bins)."""
  return [(f"tacotron_t{text_len}_f{frames}_b{batch}",
           dict(text_len=text_len, frames=frames, batch=batch))
          for text_len, frames, batch in sizes]


def mambas(sizes):
  """(layers, model width, sequence length, batch) per variant; inner width
  2 x the model width, 16 states per channel, 50,280 tokens."""
  return [(f"mamba_l{layers}_d{d_model}_s{seq}_b{batch}",
           dict(layers=layers, d_model=d_model, seq=seq, batch=batch))
          for layers, d_model, seq, batch in sizes]


def vqvaes(sizes):
  """(image size, residual width, residual blocks per stack, codebook size,
  batch) per variant; 64-wide codes on a map a quarter of the image's
  side, commitment weight 0.25."""
  return [(f"vqvae_i{image}_w{hidden}_r{blocks}_k{codes}_b{batch}",
           dict(image_size=image, hidden=hidden, blocks=blocks, codes=codes,
                batch=batch))
          for image, hidden, blocks, codes, batch in sizes]


def pixelcnns(sizes):
  """(image size, channels, maps per stack, layers, batch) per variant; a
  7x7 first mask, 3x3 after, 256 intensities, conditioned on 10
  classes."""
  return [(f"pixelcnn_i{image}_c{channels}_f{filters}_l{layers}_b{batch}",
           dict(image_size=image, channels=channels, filters=filters,
                layers=layers, batch=batch))
          for image, channels, filters, layers, batch in sizes]


def hourglasses(sizes):
  """(image size, stacks, features, keypoints, batch) per variant;
  hourglasses of depth 4, heatmaps at a quarter of the image's side."""
  return [(f"hourglass_i{image}_s{stacks}_f{features}_k{keypoints}_b{batch}",
           dict(image_size=image, stacks=stacks, features=features,
                keypoints=keypoints, batch=batch))
          for image, stacks, features, keypoints, batch in sizes]


def nerfs(sizes):
  """(rays, coarse samples, fine samples per later level, MLP width, MLP
  depth, levels) per variant; positions encoded at 10 frequencies,
  directions at 4, depths between 2 and 6."""
  return [(f"nerf_r{rays}_c{coarse}_f{fine}_w{width}_d{depth}_l{levels}",
           dict(rays=rays, coarse_samples=coarse, fine_samples=fine,
                width=width, depth=depth, levels=levels))
          for rays, coarse, fine, width, depth, levels in sizes]


def glows(sizes):
  """(image size, levels, flow steps per level, coupling width, batch) per
  variant; 8-bit RGB images, 12 x 2^i channels in level i."""
  return [(f"glow_i{image}_l{levels}_k{steps}_w{width}_b{batch}",
           dict(image_size=image, levels=levels, steps=steps, width=width,
                batch=batch))
          for image, levels, steps, width, batch in sizes]


def gans(sizes):
  """(image size, base filters, batch) per variant."""
  return [(f"dcgan_i{image}_f{filters}_b{batch}",
           dict(image_size=image, base_filters=filters, batch=batch))
          for image, filters, batch in sizes]


def detectors(sizes):
  """(image size, backbone width, batch) per variant."""
  return [(f"detector_i{image}_w{width}_b{batch}",
           dict(image_size=image, width=width, batch=batch))
          for image, width, batch in sizes]


def switch_transformers(sizes):
  """(layers, hidden, experts, sequence length, batch) per variant."""
  return [(f"switch_l{layers}_h{hidden}_e{experts}_s{seq}_b{batch}",
           dict(layers=layers, hidden=hidden, experts=experts, seq=seq,
                batch=batch))
          for layers, hidden, experts, seq, batch in sizes]


def graph_classifiers(sizes):
  """(layers, hidden, nodes per graph, batch) per variant."""
  return [(f"gin_l{layers}_h{hidden}_n{nodes}_b{batch}",
           dict(layers=layers, hidden=hidden, nodes=nodes, batch=batch))
          for layers, hidden, nodes, batch in sizes]


def dual_encoders(sizes):
  """(image layers, text layers, hidden, text length, batch) per variant;
  224x224 images in 16x16 patches, 8 heads."""
  return [(f"clip_i{image}_t{text}_h{hidden}_s{seq}_b{batch}",
           dict(image_layers=image, text_layers=text, hidden=hidden, heads=8,
                image_size=224, patch=16, text_seq=seq, batch=batch))
          for image, text, hidden, seq, batch in sizes]


def perceivers(sizes):
  """(latents, hidden, latent layers, repeats, batch) per variant; 224x224
  images in 8x8 patches, 8 heads."""
  return [(f"perceiver_n{latents}_h{hidden}_l{layers}_r{repeats}_b{batch}",
           dict(latents=latents, hidden=hidden, layers=layers,
                repeats=repeats, image_size=224, patch=8, batch=batch))
          for latents, hidden, layers, repeats, batch in sizes]


def keras3_applications(applications):
  """Keras 3 applications at (name, image size, batch)."""
  return [(f"keras3_{name.lower()}_{image}_b{batch}",
           dict(application=name, image_size=image, batch=batch))
          for name, image, batch in applications]


def keras3_decoders(decoders):
  """Keras 3 decoders at (layers, hidden, heads, sequence length, batch)."""
  return [(f"keras3_decoder_l{layers}_h{hidden}_s{seq}_b{batch}",
           dict(layers=layers, hidden=hidden, heads=heads, seq=seq,
                batch=batch))
          for layers, hidden, heads, seq, batch in decoders]


def unets(sizes):
  """(depth, filters, image size, batch) per variant."""
  return [(f"unet_d{depth}_f{filters}_i{image}_b{batch}",
           dict(depth=depth, filters=filters, image_size=image, batch=batch))
          for depth, filters, image, batch in sizes]


def mixers(sizes):
  """(layers, hidden, token MLP, channel MLP, patch, image size, batch)."""
  return [(f"mixer_l{layers}_h{hidden}_p{patch}_i{image}_b{batch}",
           dict(layers=layers, hidden=hidden, token_mlp=token,
                channel_mlp=channel, patch=patch, image_size=image,
                batch=batch))
          for layers, hidden, token, channel, patch, image, batch in sizes]


def dlrms(sizes):
  """(features, max rows, embedding dim, bottom MLP, top MLP, batch)."""
  named = []
  for features, max_rows, dim, bottom, top, batch in sizes:
    rows = tuple(min(r, max_rows) for r in _CLICK_LOG_ROWS[:features])
    named.append((f"dlrm_t{features}_r{max_rows // 1000}k_d{dim}_b{batch}",
                  dict(vocabularies=rows, embedding_dim=dim,
                       dense_features=13, bottom=bottom, top=top,
                       batch=batch)))
  return named
