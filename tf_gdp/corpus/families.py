"""The corpus: training-step graphs of real model code, by family, and the split.

A family is one model design (one author's code) at several sizes: batch,
image size, sequence length, depth. The sizes are spread so that, on four
16 GiB GPUs, some steps are best on one device, some pipeline well and some
fit only on several devices. Generalization is judged across families, so
the split is by family and fixed here: a policy is pre-trained on the
`TRAIN` families only, and the `EVAL` families are run only to evaluate it.

Sources: `tf_keras.applications` (`training_steps.keras_application`),
transformers, recurrent models, U-Nets, MLP-Mixers, a DLRM-style recommender, a
speech recognizer's acoustic model, a GAN, an object detector, a
mixture-of-experts transformer, a graph neural network, a CLIP-style dual
encoder, a Perceiver, an R(2+1)D video classifier, PointNet, a Swin
Transformer, a Conformer speech recognizer, an HRNet pose estimator, a DDPM
diffusion U-Net, a MobileViT image classifier, a DeepLabV3+ semantic segmenter,
an image captioner, a LLaMA-style language model, an EDSR super-resolution
network, a convolutional sequence-to-sequence translation model, a Tacotron 2
text-to-speech model, a Mamba selective state-space language model, a VQ-VAE
image autoencoder, a Gated PixelCNN autoregressive image model, a Stacked
Hourglass pose estimator, a NeRF neural radiance field and a Glow normalizing
flow written with tf_keras layers (`transformers`, `recurrent`,
`vision_models`, `recommenders`, `speech`, `gan`, `detector`, `moe`, `gnn`,
`dual_encoder`, `perceiver`, `video`, `pointnet`, `swin`, `conformer`, `hrnet`,
`diffusion`, `mobilevit`, `deeplab`, `captioner`, `llama`, `edsr`, `convs2s`,
`tacotron`, `mamba`, `vqvae`, `pixelcnn`, `hourglass`, `nerf`, `glow`), Keras 3
applications and layers (`keras3_models`), the zoo's models (`tf_gdp.zoo`, with
knobs) and generated graphs (`tf_gdp.graph.generators`). The evaluation
families' variant names and arguments come from `eval_variants`.
"""

import dataclasses
import types
from typing import Mapping, Tuple

from tf_gdp.corpus import eval_variants
from tf_gdp.corpus import sizes

TRAIN = "train"
EVAL = "eval"
SPLITS = (TRAIN, EVAL)
# How a variant is built: the builder that takes its `args`.
(KERAS, ENCODER, DECODER, VIT, TRANSLATION, RECURRENT, UNET, MIXER, DLRM,
 SPEECH, GAN, DETECTOR, MOE, GNN, KERAS3_APPLICATION, KERAS3_DECODER,
 DUAL_ENCODER, PERCEIVER, ZOO, GENERATED, TAGGER, VIDEO, POINTNET,
 SWIN, CONFORMER, HRNET, DIFFUSION, MOBILEVIT, DEEPLAB, CAPTIONER,
 LLAMA, EDSR, CONVS2S, TACOTRON, MAMBA, VQVAE, PIXELCNN, HOURGLASS,
 NERF, GLOW) = (
     "keras_application", "encoder", "decoder", "vit", "translation",
     "recurrent", "unet", "mlp_mixer", "dlrm", "speech", "gan", "detector",
     "moe", "gnn", "keras3_application", "keras3_decoder", "dual_encoder",
     "perceiver", "zoo", "generated", "tagger", "video", "pointnet", "swin",
     "conformer", "hrnet", "diffusion", "mobilevit", "deeplab", "captioner",
     "llama", "edsr", "convs2s", "tacotron", "mamba", "vqvae", "pixelcnn",
     "hourglass", "nerf", "glow")


@dataclasses.dataclass(frozen=True)
class Variant:
  """One corpus graph: a family's model at one size."""
  name: str
  family: str
  kind: str  # KERAS, ENCODER, ... (how it is built)
  args: Mapping[str, object]


@dataclasses.dataclass(frozen=True)
class Family:
  name: str
  split: str
  about: str
  variants: Tuple[Variant, ...]


def _keras(family, application, sizes, **kwargs):
  """Variants of one Keras application at (image size, batch) pairs."""
  slug = application.lower()
  return tuple(
      Variant(f"{slug}_{image}_b{batch}", family, KERAS,
              types.MappingProxyType(dict(
                  application=application, image_size=image, batch=batch,
                  optimizer="momentum", **kwargs)))
      for image, batch in sizes)


def _variants(family, kind, named):
  return tuple(Variant(name, family, kind, types.MappingProxyType(args))
               for name, args in named)


def _language_models(family, kind, sizes):
  """(layers, hidden, heads, seq, batch[, vocab]) per variant."""
  out = []
  for size in sizes:
    layers, hidden, heads, seq, batch = size[:5]
    args = dict(layers=layers, hidden=hidden, heads=heads, seq=seq,
                batch=batch)
    if len(size) > 5:
      args["vocab"] = size[5]
    out.append((f"{family}_l{layers}_h{hidden}_s{seq}_b{batch}", args))
  return _variants(family, kind, out)


def _zoo(family, items):
  """(zoo model, knobs dict) per variant."""
  named = []
  for model, knobs in items:
    suffix = "".join(f"_{k[0]}{v}" for k, v in sorted(knobs.items()))
    named.append((f"{model}{suffix}", {"model": model, "knobs": knobs}))
  return _variants(family, ZOO, named)


def _generated(family, specs):
  return _variants(family, GENERATED,
                   [(spec.replace(":", "_").replace("=", ""), {"spec": spec})
                    for spec in specs])


_FAMILIES = (
    # ---- training families ----
    Family("resnet", TRAIN, "tf_keras.applications ResNet / ResNetV2",
           _keras("resnet", "ResNet50", [(224, 8), (224, 64), (224, 256)])
           + _keras("resnet", "ResNet101V2", [(224, 32)])),
    Family("mobilenet", TRAIN, "tf_keras.applications MobileNet v1, v2, v3",
           _keras("mobilenet", "MobileNet", [(224, 32)])
           + _keras("mobilenet", "MobileNetV2", [(224, 16), (224, 384)])
           + _keras("mobilenet", "MobileNetV3Large", [(224, 64)])
           + _keras("mobilenet", "MobileNetV3Small", [(224, 128)])),
    Family("efficientnet", TRAIN, "tf_keras.applications EfficientNet, V2",
           _keras("efficientnet", "EfficientNetB0", [(224, 16), (224, 192)])
           + _keras("efficientnet", "EfficientNetV2B0", [(224, 64)])),
    Family("vgg", TRAIN, "tf_keras.applications VGG16, VGG19",
           _keras("vgg", "VGG16", [(224, 8), (224, 128)])
           + _keras("vgg", "VGG19", [(224, 32)])),
    Family("inception_resnet", TRAIN, "tf_keras.applications "
           "InceptionResNetV2",
           _keras("inception_resnet", "InceptionResNetV2",
                  [(299, 8), (299, 64)])),
    Family("encoder", TRAIN, "BERT-style encoder, masked LM, Adam "
           "(corpus.transformers)",
           _language_models("encoder", ENCODER, [
               (2, 256, 4, 128, 32), (6, 512, 8, 128, 32),
               (12, 768, 12, 128, 32), (12, 768, 12, 512, 48)])),
    Family("vit", TRAIN, "ViT-style image classifier, Adam "
           "(corpus.transformers)",
           _variants("vit", VIT, [
               ("vit_l6_h384_p16_b64", dict(layers=6, hidden=384, heads=6,
                                            image_size=224, patch=16,
                                            batch=64)),
               ("vit_l12_h768_p16_b128", dict(layers=12, hidden=768,
                                              heads=12, image_size=224,
                                              patch=16, batch=128))])),
    Family("keras_rnn", TRAIN, "unrolled tf_keras LSTM / GRU language "
           "models (corpus.recurrent)",
           _variants("keras_rnn", RECURRENT, [
               ("lstm_l2_h512_s20_b64", dict(cell="lstm", layers=2,
                                             hidden=512, seq=20, batch=64)),
               ("lstm_l4_h1024_s30_b128", dict(cell="lstm", layers=4,
                                               hidden=1024, seq=30,
                                               batch=128)),
               ("gru_l3_h768_s25_b64", dict(cell="gru", layers=3, hidden=768,
                                            seq=25, batch=64))])),
    Family("tagger", TRAIN, "unrolled bidirectional tf_keras LSTM / GRU "
           "sequence taggers, Adam (corpus.recurrent)",
           _variants("tagger", TAGGER, [
               ("tagger_lstm_l2_h256_s32_b32", dict(
                   cell="lstm", layers=2, hidden=256, seq=32, batch=32)),
               ("tagger_gru_l3_h512_s40_b64", dict(
                   cell="gru", layers=3, hidden=512, seq=40, batch=64)),
               ("tagger_lstm_l4_h1024_s50_b128", dict(
                   cell="lstm", layers=4, hidden=1024, seq=50,
                   batch=128))])),
    Family("rnnlm", TRAIN, "the zoo's RNNLM",
           _zoo("rnnlm", [("rnnlm2", {}), ("rnnlm4", {"batch": 32}),
                          ("rnnlm2", {"batch": 512})])),
    Family("gnmt", TRAIN, "the zoo's GNMT",
           _zoo("gnmt", [("gnmt2", {}), ("gnmt4", {"batch": 256})])),
    Family("transformer_xl", TRAIN, "the zoo's Transformer-XL",
           _zoo("transformer_xl", [("transformer_xl2", {}),
                                   ("transformer_xl4", {"batch": 32})])),
    Family("inception_v3", TRAIN, "the zoo's Inception-v3",
           _zoo("inception_v3", [("inception_v3", {}),
                                 ("inception_v3", {"batch": 128})])),
    Family("generated", TRAIN, "generated layered and cell graphs",
           _generated("generated", ["layered:2000", "layered:5000:width=8",
                                    "cells:2000", "cells:4000:cell=6"])),
    # ---- evaluation families ----
    Family("densenet", EVAL, "tf_keras.applications DenseNet",
           _keras("densenet", "DenseNet121", [(224, 16), (224, 128)])
           + _keras("densenet", "DenseNet169", [(224, 32)])),
    Family("convnext", EVAL, "tf_keras.applications ConvNeXt",
           _keras("convnext", "ConvNeXtTiny", [(224, 16), (224, 128)])),
    Family("regnet", EVAL, "tf_keras.applications RegNetX, RegNetY",
           _keras("regnet", "RegNetX004", [(224, 64)])
           + _keras("regnet", "RegNetY008", [(224, 256)])),
    Family("nasnet", EVAL, "tf_keras.applications NASNetMobile",
           _keras("nasnet", "NASNetMobile", [(224, 32)])),
    Family("xception", EVAL, "tf_keras.applications Xception",
           _keras("xception", "Xception", [(299, 16), (299, 96)])),
    Family("decoder", EVAL, "GPT-style causal decoder, tied output "
           "projection, Adam (corpus.transformers)",
           _language_models("decoder", DECODER, [
               (4, 512, 8, 256, 16, 50257), (12, 768, 12, 256, 16, 50257),
               (12, 1024, 16, 1024, 8, 50257)])),
    Family("wavenet", EVAL, "the zoo's WaveNet",
           _zoo("wavenet", [("wavenet2", {}), ("wavenet4", {"batch": 8})])),
    Family("amoebanet", EVAL, "the zoo's AmoebaNet",
           _zoo("amoebanet", [("amoebanet", {})])),
    Family("unet", EVAL, "U-Net segmentation, skip concatenations, Adam "
           "(corpus.vision_models)",
           _variants("unet", UNET, eval_variants.unets([
               (3, 32, 128, 8), (4, 64, 256, 16), (5, 64, 512, 8)]))),
    Family("mlp_mixer", EVAL, "MLP-Mixer classifier, token mixing across "
           "patches, Adam (corpus.vision_models)",
           _variants("mlp_mixer", MIXER, eval_variants.mixers([
               (8, 512, 256, 2048, 16, 224, 32),
               (12, 768, 384, 3072, 16, 224, 48),
               (12, 768, 384, 3072, 16, 224, 128)]))),
    Family("recommender", EVAL, "DLRM-style click model, embedding tables, "
           "dot interactions, Adam (corpus.recommenders)",
           _variants("recommender", DLRM, eval_variants.dlrms([
               (8, 100_000, 16, (64, 32), (64, 32), 512),
               (26, 1_000_000, 64, (512, 256), (512, 256), 4096),
               (26, 1_500_000, 128, (512, 256), (1024, 1024, 512, 256),
                2048)]))),
    Family("resnet_rs", EVAL, "tf_keras.applications ResNet-RS "
           "(squeeze-and-excitation, ResNet-D stem)",
           _keras("resnet_rs", "ResNetRS50", [(160, 32)])
           + _keras("resnet_rs", "ResNetRS101", [(192, 128)])),
    Family("translation", EVAL, "Transformer encoder-decoder translation "
           "model, cross-attention, Adam (corpus.transformers)",
           _variants("translation", TRANSLATION, eval_variants.translations([
               (3, 3, 512, 8, 64, 64), (6, 6, 512, 8, 128, 64),
               (6, 6, 1024, 16, 256, 32)]))),
    Family("speech", EVAL, "DeepSpeech-2-style acoustic model: 2-D "
           "convolutions, bidirectional GRUs, per-frame softmax, Adam "
           "(corpus.speech)",
           _variants("speech", SPEECH, eval_variants.acoustic_models([
               (2, 256, 40, 32), (3, 512, 40, 64), (4, 1024, 40, 256)]))),
    Family("gan", EVAL, "DCGAN: a generator and a discriminator trained in "
           "one step, two tapes, two Adams (corpus.gan)",
           _variants("gan", GAN, eval_variants.gans(sizes.GAN_SIZES))),
    Family("detector", EVAL, "single-stage object detector: residual "
           "backbone, feature pyramid, class and box heads per level, Adam "
           "(corpus.detector)",
           _variants("detector", DETECTOR,
                     eval_variants.detectors(sizes.DETECTOR_SIZES))),
    Family("moe", EVAL, "Switch-Transformer-style masked LM: every other "
           "feed-forward layer routed top-1 to experts with their own "
           "weights, capacity-limited dense dispatch, load-balancing loss, "
           "Adam (corpus.moe)",
           _variants("moe", MOE,
                     eval_variants.switch_transformers(sizes.MOE_SIZES))),
    Family("gnn", EVAL, "GIN graph classifier: sum aggregation over a dense "
           "adjacency, an MLP with batch norm per layer, a readout from "
           "every layer, Adam (corpus.gnn)",
           _variants("gnn", GNN,
                     eval_variants.graph_classifiers(sizes.GNN_SIZES))),
    Family("keras3", EVAL, "Keras 3 (the keras package, not tf_keras): "
           "keras.applications InceptionV3 and ConvNeXtSmall, and a "
           "decoder-only language model of keras.layers; Keras losses, "
           "keras.optimizers.Adam (corpus.keras3_models)",
           _variants("keras3", KERAS3_APPLICATION,
                     eval_variants.keras3_applications(
                         sizes.KERAS3_APPLICATIONS))
           + _variants("keras3", KERAS3_DECODER,
                       eval_variants.keras3_decoders(sizes.KERAS3_DECODERS))),
    Family("dual_encoder", EVAL, "CLIP-style dual encoder: a ViT-style image "
           "tower and a causal text tower side by side, joined by a "
           "symmetric contrastive loss with a learned temperature, Adam "
           "(corpus.dual_encoder)",
           _variants("dual_encoder", DUAL_ENCODER,
                     eval_variants.dual_encoders(sizes.DUAL_ENCODER_SIZES))),
    Family("perceiver", EVAL, "Perceiver-style image classifier: a learned "
           "latent array cross-attends to image patches, then latent "
           "self-attention blocks; cross-attention and blocks applied again "
           "with the same weights, Adam (corpus.perceiver)",
           _variants("perceiver", PERCEIVER,
                     eval_variants.perceivers(sizes.PERCEIVER_SIZES))),
    Family("video", EVAL, "R(2+1)D video classifier: residual blocks of "
           "per-frame 2-D and per-pixel temporal convolutions, Adam "
           "(corpus.video)",
           _variants("video", VIDEO, eval_variants.video_classifiers([
               (1, 8, 112, 8), (2, 16, 112, 16), (2, 16, 160, 16)]))),
    Family("pointnet", EVAL, "PointNet point-cloud classifier and part "
           "segmenter: shared per-point MLPs behind learned 3x3 and 64x64 "
           "transforms, a max over the points, an orthogonality penalty, "
           "Adam (corpus.pointnet)",
           _variants("pointnet", POINTNET,
                     eval_variants.point_clouds(sizes.POINTNET_SIZES))),
    Family("swin", EVAL, "Swin Transformer image classifier: four stages "
           "of window attention with relative position biases, every other "
           "block on windows shifted by tf.roll with a mask, patch merging "
           "between stages, Adam (corpus.swin)",
           _variants("swin", SWIN, eval_variants.swins(sizes.SWIN_SIZES))),
    Family("conformer", EVAL, "Conformer speech recognizer: a strided "
           "convolutional front end, then blocks of half-step feed-forward, "
           "self-attention with relative positions, a convolution module "
           "(GLU, depthwise convolution, batch norm) and half-step "
           "feed-forward; CTC loss, Adam (corpus.conformer)",
           _variants("conformer", CONFORMER,
                     eval_variants.conformers(sizes.CONFORMER_SIZES))),
    Family("hrnet", EVAL, "HRNet pose estimator: a strided stem and "
           "bottleneck blocks, then stages of 2, 3 and 4 parallel "
           "resolution branches of residual blocks, each module ending in an "
           "exchange unit that sums every branch resampled to every other "
           "(strided convolutions down, 1x1 convolution and nearest "
           "upsampling up); heatmap MSE loss, Adam (corpus.hrnet)",
           _variants("hrnet", HRNET, eval_variants.hrnets(sizes.HRNET_SIZES))),
    Family("diffusion", EVAL, "DDPM denoising diffusion U-Net: residual "
           "blocks with group norm, each reading a sinusoidal timestep "
           "embedding, self-attention over whole maps at chosen sides, "
           "strided convolutions down, nearest resizing up, skip "
           "concatenations; noise-prediction MSE loss, Adam "
           "(corpus.diffusion)",
           _variants("diffusion", DIFFUSION,
                     eval_variants.diffusions(sizes.DIFFUSION_SIZES))),
    Family("mobilevit", EVAL, "MobileViT image classifier: MobileNetV2 "
           "inverted residual blocks (1x1 expansion, 3x3 depthwise, 1x1 "
           "projection), and at 1/8, 1/16 and 1/32 of the image MobileViT "
           "blocks: a local convolution, the map unfolded into 2x2 patches "
           "so that transformer layers attend across patches at each "
           "position within them, folded back, concatenated with the "
           "block's input and fused by a convolution; batch norm, swish, "
           "softmax cross-entropy, Adam (corpus.mobilevit)",
           _variants("mobilevit", MOBILEVIT, eval_variants.mobilevits(
               sizes.MOBILEVIT_SIZES, sizes.MOBILEVIT_WIDTHS))),
    Family("deeplab", EVAL, "DeepLabV3+ semantic segmenter: a ResNet "
           "bottleneck backbone whose last stage is dilated instead of "
           "strided (output stride 16), atrous spatial pyramid pooling "
           "(a 1x1 convolution, 3x3 convolutions at dilations 6, 12 and 18 "
           "and image-level pooling side by side, concatenated), a decoder "
           "that upsamples it 4x and concatenates the stride-4 feature "
           "reduced to 48 channels; batch norm, ReLU, per-pixel softmax "
           "cross-entropy, Adam (corpus.deeplab)",
           _variants("deeplab", DEEPLAB, eval_variants.deeplabs(
               sizes.DEEPLAB_SIZES, sizes.DEEPLAB_BACKBONES))),
    Family("captioner", EVAL, "Image captioner: a ResNet encoder of basic "
           "residual blocks whose last map is flattened into visual tokens, "
           "projected to the model width (optional transformer encoder "
           "layers), and a pre-norm transformer decoder whose every layer "
           "runs causal self-attention over the caption, cross-attention "
           "to the visual tokens and a GELU MLP; batch norm, ReLU, "
           "next-token softmax cross-entropy (teacher forcing), Adam "
           "(corpus.captioner)",
           _variants("captioner", CAPTIONER,
                     eval_variants.captioners(sizes.CAPTIONER_SIZES))),
    Family("llama", EVAL, "LLaMA-style decoder-only language model: a "
           "token embedding, then pre-norm decoder blocks (each its own "
           "numbered scope) of RMSNorm, causal self-attention with rotary "
           "position embeddings on queries and keys and grouped-query "
           "attention (fewer key/value heads than query heads), RMSNorm and "
           "a SwiGLU MLP, each with a residual add; a final RMSNorm, an "
           "untied output projection, next-token softmax cross-entropy, "
           "AdamW (corpus.llama)",
           _variants("llama", LLAMA, eval_variants.llamas(sizes.LLAMA_SIZES))),
    Family("edsr", EVAL, "EDSR single-image super-resolution network: "
           "a 3x3 convolution from RGB to feature maps, residual blocks "
           "(each its own numbered scope) of a 3x3 convolution, ReLU and a "
           "3x3 convolution scaled by a constant and added to the block's "
           "input, no batch norm; a 3x3 convolution and a global skip from "
           "the head, a sub-pixel upsampler (convolutions to r^2 times the "
           "maps, depth-to-space by r) and a 3x3 convolution to RGB; L1 "
           "loss against the high-resolution image, Adam (corpus.edsr)",
           _variants("edsr", EDSR, eval_variants.edsrs(sizes.EDSR_SIZES))),
    Family("convs2s", EVAL, "ConvS2S convolutional sequence-to-sequence "
           "translation model: token and learned position embeddings "
           "projected to the convolution width; encoder blocks (each its "
           "own numbered scope) of a width-3 convolution to twice the "
           "width, a gated linear unit and a residual add scaled by "
           "sqrt(0.5); decoder blocks of a causal (left-padded) width-3 "
           "convolution and a gated linear unit, then multi-step attention "
           "over the encoder's output (the context its sum with the source "
           "embedding) added back, and a scaled residual add; projections "
           "to the embedding size and to the vocabulary, next-token softmax "
           "cross-entropy, SGD with Nesterov momentum on gradients clipped "
           "to global norm 0.1 (corpus.convs2s)",
           _variants("convs2s", CONVS2S,
                     eval_variants.convs2s_models(sizes.CONVS2S_SIZES))),
    Family("tacotron", EVAL, "Tacotron 2 text-to-speech model: a "
           "character embedding, three width-5 convolutions (each its own "
           "numbered scope) with batch norm and ReLU and a bidirectional "
           "LSTM as the encoder; a decoder unrolled over the mel frames "
           "(each step its own numbered scope, every step on the same "
           "weights) of a two-layer ReLU prenet on the previous "
           "ground-truth frame (teacher forcing), an attention LSTM, "
           "location-sensitive attention (a convolution over the summed "
           "earlier attention weights) over the encoder's output, a decoder "
           "LSTM and linear projections to the frame and a stop-token "
           "logit; a five-convolution postnet (batch norm, tanh) added as "
           "a residual; mean squared error of the frames before and after "
           "the postnet plus the stop token's sigmoid cross-entropy, Adam "
           "on gradients clipped to global norm 1 (corpus.tacotron)",
           _variants("tacotron", TACOTRON,
                     eval_variants.tacotrons(sizes.TACOTRON_SIZES))),
    Family("mamba", EVAL, "Mamba selective state-space language model: a "
           "token embedding, then residual blocks (each its own numbered "
           "scope) of RMSNorm, an input projection split into a stream and "
           "a gate, a causal (left-padded) width-4 depthwise convolution "
           "and SiLU on the stream, input-dependent step size, B and C "
           "projected from it, the discretised recurrence h_t = "
           "exp(delta A) h_{t-1} + delta B x_t run as a parallel "
           "associative scan over the sequence (TensorFlow Probability's "
           "scan_associative), the readout C h + D x gated by SiLU of the "
           "gate and an output projection; a final RMSNorm, an output "
           "projection tied to the embedding, next-token softmax "
           "cross-entropy, AdamW on gradients clipped to global norm 1 "
           "(corpus.mamba)",
           _variants("mamba", MAMBA,
                     eval_variants.mambas(sizes.MAMBA_SIZES))),
    Family("vqvae", EVAL, "VQ-VAE image autoencoder: an encoder of two "
           "stride-2 4x4 convolutions, a 3x3 convolution and residual "
           "blocks (each its own numbered scope) of ReLU, a 3x3 "
           "convolution, ReLU and a 1x1 convolution added to the block's "
           "input; a vector-quantisation bottleneck (squared distances to "
           "every code of a learned codebook, the argmin, a gather of the "
           "nearest code, the straight-through estimator by stop_gradient); "
           "a decoder of a 3x3 convolution, residual blocks and two "
           "stride-2 4x4 transposed convolutions back to the image; the "
           "reconstruction's mean squared error plus the codebook loss and "
           "0.25 times the commitment loss, Adam on gradients clipped to "
           "global norm 1 (corpus.vqvae)",
           _variants("vqvae", VQVAE,
                     eval_variants.vqvaes(sizes.VQVAE_SIZES))),
    Family("pixelcnn", EVAL, "Gated PixelCNN autoregressive image model: "
           "layers (each its own numbered scope) of a vertical stack, a "
           "k x k convolution masked to the rows above, and a horizontal "
           "stack, a 1 x k convolution masked to the pixels to the left "
           "(mask type A in the first layer, without the centre; type B "
           "after), a 1x1 convolution linking the vertical stack's "
           "pre-activations into the horizontal stack's, gated activations "
           "tanh(a) * sigmoid(b) of the two halves of each stack's maps "
           "with a class embedding added inside every gate, a 1x1 "
           "convolution and a residual connection on the horizontal stack; "
           "ReLU and 1x1 convolutions to 256 logits per pixel and channel, "
           "softmax cross-entropy against the input image's integer values, "
           "Adam (corpus.pixelcnn)",
           _variants("pixelcnn", PIXELCNN,
                     eval_variants.pixelcnns(sizes.PIXELCNN_SIZES))),
    Family("hourglass", EVAL, "Stacked Hourglass pose estimator: a stem "
           "(a 7x7 stride-2 convolution, a residual module, a max pool and "
           "two residual modules) to a quarter of the image, then "
           "hourglasses (each its own numbered scope), each recursive over "
           "4 levels: an upper branch, a residual module at the level's "
           "resolution, added to a lower branch, a 2x2 max pool, residual "
           "modules around the next level and a nearest-neighbour "
           "upsampling; residual modules are pre-activation bottlenecks "
           "(batch norm, ReLU, 1x1, 3x3, 1x1 convolutions, a 1x1 projection "
           "where the width changes). After each hourglass a residual "
           "module, a 1x1 convolution with batch norm and ReLU and a 1x1 "
           "convolution to one heatmap per keypoint at a quarter of the "
           "image; a mean squared error against target heatmaps for "
           "every stack (intermediate supervision), summed; between stacks "
           "1x1 convolutions of the features and of the heatmaps added to "
           "the stack's input; Adam (corpus.hourglass)",
           _variants("hourglass", HOURGLASS,
                     eval_variants.hourglasses(sizes.HOURGLASS_SIZES))),
    Family("nerf", EVAL, "NeRF radiance field on a batch of rays: levels "
           "(each its own numbered scope and MLP), the first at stratified "
           "depths, each later one adding depths inverse-transform sampled "
           "(searchsorted) from the previous level's weights under "
           "stop_gradient, merged and sorted; positions and directions "
           "encoded by sin and cos (63 and 27 features); dense ReLU layers, "
           "the position concatenated again halfway, a density head, "
           "features joined with the direction, a half-width ReLU layer, a "
           "sigmoid RGB head; volume rendering (exclusive cumulative "
           "product of transmittance); each level's mean squared error, "
           "summed; Adam (corpus.nerf)",
           _variants("nerf", NERF, eval_variants.nerfs(sizes.NERF_SIZES))),
    Family("glow", EVAL, "Glow normalizing flow: levels of a squeeze, flow "
           "steps (actnorm, LU-form 1x1 convolution, affine coupling) and a "
           "split to a learned prior; bits per dimension, Adam (corpus.glow)",
           _variants("glow", GLOW, eval_variants.glows(sizes.GLOW_SIZES))),
)
FAMILIES = types.MappingProxyType({f.name: f for f in _FAMILIES})
VARIANTS = types.MappingProxyType(
    {v.name: v for f in _FAMILIES for v in f.variants})


def split_of(variant: Variant) -> str:
  return FAMILIES[variant.family].split


def variants(selection: str = "all") -> Tuple[Variant, ...]:
  """The variants of a split (`train`, `eval`), a family, or `all`.

  Raises:
    KeyError: an unknown selection (the caller words the error).
  """
  if selection == "all":
    return tuple(VARIANTS.values())
  if selection in SPLITS:
    return tuple(v for f in _FAMILIES if f.split == selection
                 for v in f.variants)
  if selection in FAMILIES:
    return FAMILIES[selection].variants
  if selection in VARIANTS:
    return (VARIANTS[selection],)
  raise KeyError(selection)
