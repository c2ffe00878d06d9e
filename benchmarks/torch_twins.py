"""PyTorch twins of the library's rounds and evaluation, for the benchmarks' "vs PyTorch"
columns: the same models (the reference CNN, ResNet-18 with GroupNorm(2), the Shakespeare
LSTM) as lean per-client loops, as the authors' simulator runs them. Every function returns
None without torch (or without a twin of the model)."""
import time

import numpy as np

from benchmarks.timing import MEAN, STD


def torch_model(name, width=1.0):
    """The PyTorch twin of a library model (same layers and sizes), or None: the reference
    CNN, or the ImageNet-stem ResNet-18 with GroupNorm(2) (no torchvision needed)."""
    import torch

    nn = torch.nn
    if name == "cnn" and width == 1.0:
        return nn.Sequential(nn.Conv2d(3, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(64, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(1600, 384), nn.ReLU(), nn.Linear(384, 192), nn.ReLU(),
                             nn.Linear(192, 10))
    if name != "resnet18_gn":
        return None

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.norm1, self.norm2 = nn.GroupNorm(2, cout), nn.GroupNorm(2, cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.GroupNorm(2, cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = self.norm2(self.conv2(torch.relu(self.norm1(self.conv1(x)))))
            return torch.relu(y + self.down(x))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.GroupNorm(2, 64), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            layers.append(Block(cin, cout, 2 if stage > 0 and block == 0 else 1))
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10))


def torch_images(images):
    """uint8 [..., H, W, C] -> normalised float [..., C, H, W], as the library's normalize."""
    import torch

    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    x = torch.from_numpy(np.ascontiguousarray(images)).float()
    return (x.permute(*range(x.ndim - 3), -1, -3, -2) / 255.0 - mean) / std


def torch_round(model_name, inp, device="cpu", width=1.0):
    """The round as a lean PyTorch per-client loop (a fresh model and SGD per client, as the
    authors' simulator; flip per example and one padded random crop per batch, clip 10, weight
    decay 1e-3, FedAvg mean), or None without torch or a PyTorch twin of the model."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    global_model = torch_model(model_name, width)
    if global_model is None:
        return None
    images, labels = inp.batches
    device = torch.device(device)
    x_all = torch_images(images).to(device)
    y_all = torch.from_numpy(labels).long().to(device)
    global_model = global_model.to(device)

    def train_client(i, model):
        opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-3)
        for k in range(x_all.shape[1]):
            x = x_all[i, k]
            flip = torch.rand(x.shape[0], device=device) < 0.5
            x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
            dy, dx = torch.randint(0, 9, (2,)).tolist()
            x = torch.nn.functional.pad(x, (4, 4, 4, 4))[:, :, dy:dy + 32, dx:dx + 32]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y_all[i, k]).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()

    return torch_fedavg(global_model, lambda: torch_model(model_name, width).to(device),
                        train_client, x_all.shape[0])


def torch_fedavg(global_model, new_model, train_client, num_clients):
    """A PyTorch FedAvg round ready to be timed: per client a fresh model loaded with the
    global state (as the authors' simulator), train_client(i, model) trains it, the mean of
    the clients' states becomes the global model. One warm-up round runs first, as the
    library variants' compiling one (PyTorch's first round pays one-time kernel set-up)."""
    import torch

    class Round:
        memory_bytes = None

        def step(self):
            state = {k: v.clone() for k, v in global_model.state_dict().items()}
            ends = []
            for i in range(num_clients):
                model = new_model()
                model.load_state_dict(state)
                train_client(i, model)
                ends.append(model.state_dict())
            global_model.load_state_dict({k: sum(e[k] for e in ends) / len(ends) for k in state})
            if next(global_model.parameters()).is_cuda:
                torch.cuda.synchronize()

    variant = Round()
    t0 = time.perf_counter()
    variant.step()
    variant.compile_seconds = time.perf_counter() - t0
    return variant


def torch_evaluation(model_name, images, labels, batch_size=1000, device="cpu", width=1.0):
    """() -> accuracy: the PyTorch twin evaluated in no-grad batches, or None."""
    try:
        import torch
    except ImportError:
        return None
    model = torch_model(model_name, width)
    if model is None:
        return None
    device = torch.device(device)
    model = model.to(device).eval()
    x_all = torch_images(images).to(device)
    y_all = torch.from_numpy(labels).long().to(device)

    def evaluate():
        correct = 0
        with torch.no_grad():
            for i in range(0, len(y_all), batch_size):
                logits = model(x_all[i:i + batch_size])
                correct += (logits.argmax(-1) == y_all[i:i + batch_size]).sum()
        return int(correct) / len(y_all)  # int(): waits for the device

    return evaluate


def torch_lstm_round(inp, device="cpu"):
    """The LSTM round as a PyTorch per-client loop over each client's real steps only
    (Embedding 8, LSTM 2 x 256, Linear; SGD lr 1; cross-entropy ignoring PAD), or None."""
    try:
        import torch
    except ImportError:
        return None
    from fedinit_jax.data import shakespeare

    nn = torch.nn
    torch.manual_seed(0)

    class CharLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(shakespeare.VOCAB_SIZE, 8)
            self.lstm = nn.LSTM(8, 256, num_layers=2, batch_first=True)
            self.out = nn.Linear(256, shakespeare.VOCAB_SIZE)

        def forward(self, x):
            return self.out(self.lstm(self.embed(x))[0])

    device = torch.device(device)
    global_model = CharLSTM().to(device)
    x_all, y_all = (torch.from_numpy(a).long().to(device) for a in inp.batches)
    real = (np.ones(x_all.shape[:2], bool) if inp.step_mask is None
            else np.asarray(inp.step_mask))

    def train_client(i, model):
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        for k in np.flatnonzero(real[i]):
            opt.zero_grad()
            logits = model(x_all[i, k])
            torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y_all[i, k].reshape(-1),
                ignore_index=shakespeare.PAD).backward()
            opt.step()

    return torch_fedavg(global_model, lambda: CharLSTM().to(device), train_client,
                        x_all.shape[0])
